// SPDX-License-Identifier: MIT
// expect-error: stored property 'datagrams' of 'Sendable'-conforming class 'Collector' is mutable
import SocketKit

final class Collector: UdpSocketDelegate {
    var datagrams: [[UInt8]] = []
    func udpSocket(_ sock: UdpSocket, didReceive data: [UInt8], fromAddress address: SocketAddress,
                   withFilterContext context: (any Sendable)?) {
        datagrams.append(data)
    }
}
