// SPDX-License-Identifier: MIT
// expect-error: conformance of 'Screen' to protocol 'UdpSocketDelegate' crosses into main actor-isolated code
import SocketKit

@MainActor final class Screen: UdpSocketDelegate {
    var count = 0
    func udpSocket(_ sock: UdpSocket, didReceive data: [UInt8], fromAddress address: SocketAddress,
                   withFilterContext context: (any Sendable)?) {
        count += 1
    }
}
