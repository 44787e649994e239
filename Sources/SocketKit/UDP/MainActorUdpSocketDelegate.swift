// SPDX-License-Identifier: MIT
/// A UDP socket delegate that lives on the main actor: `UdpSocketDelegate`'s methods,
/// isolated to the main actor. Set it from the main actor (`UdpSocket(delegate:)`,
/// `setDelegate(_:)`, `mainActorDelegate`); its callbacks then run on the main actor
/// (`CallbackQueue.mainActor`) whatever `callbackQueue` says. See `MainActorSocketDelegate`
/// for what the main actor must do to run them.
@MainActor
public protocol MainActorUdpSocketDelegate: AnyObject {
    func udpSocket(_ sock: UdpSocket, didConnectToAddress address: SocketAddress)
    func udpSocket(_ sock: UdpSocket, didNotConnect error: SocketError)
    func udpSocket(_ sock: UdpSocket, didSendDataWithTag tag: Int)
    func udpSocket(_ sock: UdpSocket, didNotSendDataWithTag tag: Int, dueToError error: SocketError)
    func udpSocket(_ sock: UdpSocket, didReceive data: [UInt8], fromAddress address: SocketAddress,
                   withFilterContext context: (any Sendable)?)
    /// See `UdpSocketDelegate.udpSocket(_:didReceive:fromAddress:packetInfo:withFilterContext:)`;
    /// the default calls the method above.
    func udpSocket(_ sock: UdpSocket, didReceive data: [UInt8], fromAddress address: SocketAddress,
                   packetInfo: UdpPacketInfo, withFilterContext context: (any Sendable)?)
    func udpSocket(_ sock: UdpSocket, didReceiveError error: SocketError)
    func udpSocketDidClose(_ sock: UdpSocket, withError error: SocketError?)
}

extension MainActorUdpSocketDelegate {
    public func udpSocket(_ sock: UdpSocket, didConnectToAddress address: SocketAddress) {}
    public func udpSocket(_ sock: UdpSocket, didNotConnect error: SocketError) {}
    public func udpSocket(_ sock: UdpSocket, didSendDataWithTag tag: Int) {}
    public func udpSocket(_ sock: UdpSocket, didNotSendDataWithTag tag: Int, dueToError error: SocketError) {}
    public func udpSocket(_ sock: UdpSocket, didReceive data: [UInt8], fromAddress address: SocketAddress,
                          withFilterContext context: (any Sendable)?) {}
    public func udpSocket(_ sock: UdpSocket, didReceive data: [UInt8], fromAddress address: SocketAddress,
                          packetInfo: UdpPacketInfo, withFilterContext context: (any Sendable)?) {
        udpSocket(sock, didReceive: data, fromAddress: address, withFilterContext: context)
    }
    public func udpSocket(_ sock: UdpSocket, didReceiveError error: SocketError) {}
    public func udpSocketDidClose(_ sock: UdpSocket, withError error: SocketError?) {}
}

/// Lets a main-actor delegate be driven by `SwiftUdpDelegateReceiver`, as
/// `MainActorSocketDelegateAdapter` does for TCP: only ever called on the main actor.
final class MainActorUdpSocketDelegateAdapter: UdpSocketDelegate, @unchecked Sendable {
    weak var target: MainActorUdpSocketDelegate?

    init(_ target: MainActorUdpSocketDelegate) { self.target = target }

    private func onMain(_ body: @MainActor (MainActorUdpSocketDelegate) -> Void) {
        MainActor.assumeIsolated {
            if let target { body(target) }
        }
    }

    func udpSocket(_ sock: UdpSocket, didConnectToAddress address: SocketAddress) {
        onMain { $0.udpSocket(sock, didConnectToAddress: address) }
    }
    func udpSocket(_ sock: UdpSocket, didNotConnect error: SocketError) {
        onMain { $0.udpSocket(sock, didNotConnect: error) }
    }
    func udpSocket(_ sock: UdpSocket, didSendDataWithTag tag: Int) {
        onMain { $0.udpSocket(sock, didSendDataWithTag: tag) }
    }
    func udpSocket(_ sock: UdpSocket, didNotSendDataWithTag tag: Int, dueToError error: SocketError) {
        onMain { $0.udpSocket(sock, didNotSendDataWithTag: tag, dueToError: error) }
    }
    func udpSocket(_ sock: UdpSocket, didReceive data: [UInt8], fromAddress address: SocketAddress,
                   withFilterContext context: (any Sendable)?) {
        onMain { $0.udpSocket(sock, didReceive: data, fromAddress: address, withFilterContext: context) }
    }
    func udpSocket(_ sock: UdpSocket, didReceive data: [UInt8], fromAddress address: SocketAddress,
                   packetInfo: UdpPacketInfo, withFilterContext context: (any Sendable)?) {
        onMain { $0.udpSocket(sock, didReceive: data, fromAddress: address, packetInfo: packetInfo, withFilterContext: context) }
    }
    func udpSocket(_ sock: UdpSocket, didReceiveError error: SocketError) {
        onMain { $0.udpSocket(sock, didReceiveError: error) }
    }
    func udpSocketDidClose(_ sock: UdpSocket, withError error: SocketError?) {
        onMain { $0.udpSocketDidClose(sock, withError: error) }
    }
}
