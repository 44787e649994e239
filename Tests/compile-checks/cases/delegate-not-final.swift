// SPDX-License-Identifier: MIT
// A subclass could add state the compiler never sees.
// expect-error: non-final class 'Handler' cannot conform to the 'Sendable' protocol
import SocketKit

class Handler: SocketDelegate {}
