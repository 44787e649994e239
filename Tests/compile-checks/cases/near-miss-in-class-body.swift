// SPDX-License-Identifier: MIT
// The limit the delegate protocols' documentation states: a near miss declared in the class
// body is not diagnosed (it is silently never called; DelegateNameTests shows it at run
// time), which is why the conformance belongs in an extension that holds the methods.
// If a compiler starts to warn here, the documentation can say so.
// expect-clean
import SocketKit

final class Handler: SocketDelegate {
    func socket(_ sock: Socket, didReadData data: [UInt8], withTag tag: Int) {}
    func socketDidDisconnect(_ sock: Socket, withError error: Error?) {}
}
