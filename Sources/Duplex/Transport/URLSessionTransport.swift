// Apple platforms only. CI type-checks it on Linux too (where swift-corelibs-foundation has the
// types, and the task fails at run time), with -DDUPLEX_TYPECHECK_URLSESSION.
#if canImport(Darwin) || DUPLEX_TYPECHECK_URLSESSION
import DuplexSchema
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

extension WebSocketTransportKind {
    /// Foundation's `URLSessionWebSocketTask`: Apple platforms only. It supports the system's
    /// roots and ``TLSTrust/insecureAcceptAnyCertificate``; for a custom CA use ``nio``.
    public static var urlSession: WebSocketTransportKind { WebSocketTransportKind { URLSessionTransport() } }
}

/// The URLSession transport. URLSession does the framing and the close handshake; pings carry
/// no payload there, so a pong is reported with the payload of the ping it answers.
struct URLSessionTransport: WebSocketTransport {
    func connect(
        request: WebSocketRequest,
        configuration: WebSocketConfiguration,
        delegate: any WebSocketTransportDelegate
    ) async throws -> any WebSocketTransportConnection {
        _ = try request.endpoint()
        if case .certificateAuthority = configuration.tlsTrust.value {
            throw WebSocketError(.tlsFailed, "the URLSession transport trusts only the system's roots; use the NIO transport for a custom CA")
        }
        if !configuration.tlsTrust.pins.isEmpty {
            throw WebSocketError(.tlsFailed, "the URLSession transport does not check public-key pins; use the NIO transport")
        }
        if configuration.tlsIdentity != nil {
            throw WebSocketError(.tlsFailed, "the URLSession transport presents no client certificate; use the NIO transport for mutual TLS")
        }
        let seconds = Double(configuration.connectTimeout.components.seconds) + Double(configuration.connectTimeout.components.attoseconds) / 1e18
        var urlRequest = URLRequest(url: request.url, timeoutInterval: seconds)
        for (name, value) in request.additionalHeaders { urlRequest.setValue(value, forHTTPHeaderField: name) }
        if !request.protocols.isEmpty {
            urlRequest.setValue(request.protocols.joined(separator: ", "), forHTTPHeaderField: "Sec-WebSocket-Protocol")
        }
        let sessionDelegate = URLSessionWebSocketSessionDelegate(insecure: configuration.tlsTrust == .insecureAcceptAnyCertificate)
        let session = URLSession(configuration: .default, delegate: sessionDelegate, delegateQueue: nil)
        let task = session.webSocketTask(with: urlRequest)
        task.maximumMessageSize = configuration.maxMessageBytes
        let chosen = try await sessionDelegate.open(task)
        let connection = URLSessionWebSocketConnection(task: task, session: session, negotiatedProtocol: chosen, delegate: delegate)
        sessionDelegate.connection = connection
        connection.receive()
        return connection
    }
}

final class URLSessionWebSocketSessionDelegate: NSObject, URLSessionWebSocketDelegate, @unchecked Sendable {
    // @unchecked: the mutable fields are touched under `lock` only.
    private let lock = NSLock()
    private let insecure: Bool
    private var opening: CheckedContinuation<String?, any Error>?
    private weak var _connection: URLSessionWebSocketConnection?

    init(insecure: Bool) {
        self.insecure = insecure
    }

    var connection: URLSessionWebSocketConnection? {
        get { lock.withLock { _connection } }
        set { lock.withLock { _connection = newValue } }
    }

    func open(_ task: URLSessionWebSocketTask) async throws -> String? {
        try await withCheckedThrowingContinuation { continuation in
            lock.withLock { opening = continuation }
            task.resume()
        }
    }

    private func finishOpening(_ result: Result<String?, any Error>) {
        let continuation = lock.withLock { () -> CheckedContinuation<String?, any Error>? in
            defer { opening = nil }
            return opening
        }
        continuation?.resume(with: result)
    }

    func urlSession(_ session: URLSession, webSocketTask: URLSessionWebSocketTask, didOpenWithProtocol chosen: String?) {
        finishOpening(.success(chosen))
    }

    func urlSession(
        _ session: URLSession,
        webSocketTask: URLSessionWebSocketTask,
        didCloseWith closeCode: URLSessionWebSocketTask.CloseCode,
        reason: Data?
    ) {
        connection?.finish(
            code: WebSocketCloseCode(UInt16(clamping: closeCode.rawValue)), reason: reason.map { String(decoding: $0, as: UTF8.self) } ?? "",
            error: nil)
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        let status = (task.response as? HTTPURLResponse)?.statusCode
        let described: WebSocketError
        if let status, status != 101 {
            described = WebSocketError(.upgradeRejected, "the server answered the WebSocket handshake with HTTP \(status)", status: status)
        } else if let error = error as? URLError, error.code == .timedOut {
            described = WebSocketError(.connectTimeout, "the connection timed out")
        } else if let error = error as? URLError,
            [.serverCertificateUntrusted, .secureConnectionFailed, .serverCertificateHasBadDate].contains(error.code)
        {
            described = WebSocketError(.tlsFailed, "TLS failed: \(error.localizedDescription)")
        } else {
            described = WebSocketError(.connectionFailed, error.map { "the connection failed: \($0.localizedDescription)" } ?? "the connection ended")
        }
        finishOpening(.failure(described))
        connection?.finish(code: nil, reason: "", error: error == nil ? nil : WebSocketError(.connectionLost, described.message))
    }

    func urlSession(
        _ session: URLSession,
        didReceive challenge: URLAuthenticationChallenge,
        completionHandler: @escaping @Sendable (URLSession.AuthChallengeDisposition, URLCredential?) -> Void
    ) {
        // Server trust is the Security framework's: Darwin only (the Linux type-check skips it).
        #if canImport(Darwin)
        if insecure, challenge.protectionSpace.authenticationMethod == NSURLAuthenticationMethodServerTrust,
            let trust = challenge.protectionSpace.serverTrust
        {
            completionHandler(.useCredential, URLCredential(trust: trust))
            return
        }
        #endif
        completionHandler(.performDefaultHandling, nil)
    }
}

final class URLSessionWebSocketConnection: WebSocketTransportConnection, @unchecked Sendable {
    // @unchecked: `finished` and `pendingPings` are touched under `lock` only; the task and
    // session are thread-safe.
    private let task: URLSessionWebSocketTask
    private let session: URLSession
    private let delegate: any WebSocketTransportDelegate
    private let lock = NSLock()
    private var finished = false
    let negotiatedProtocol: String?

    init(task: URLSessionWebSocketTask, session: URLSession, negotiatedProtocol: String?, delegate: any WebSocketTransportDelegate) {
        self.task = task
        self.session = session
        self.negotiatedProtocol = negotiatedProtocol
        self.delegate = delegate
    }

    func receive() {
        task.receive { [weak self] result in
            guard let self else { return }
            switch result {
            case .success(.string(let text)):
                self.delegate.transportDidReceive(.string(text))
                self.receive()
            case .success(.data(let data)):
                self.delegate.transportDidReceive(.data(data))
                self.receive()
            case .success:
                self.receive()
            case .failure(let error):
                let code = self.task.closeCode == .invalid ? nil : WebSocketCloseCode(UInt16(clamping: self.task.closeCode.rawValue))
                let reason = self.task.closeReason.map { String(decoding: $0, as: UTF8.self) } ?? ""
                self.finish(code: code, reason: reason, error: code == nil ? WebSocketError(.connectionLost, "\(error.localizedDescription)") : nil)
            }
        }
    }

    func finish(code: WebSocketCloseCode?, reason: String, error: WebSocketError?) {
        let first = lock.withLock { () -> Bool in
            defer { finished = true }
            return !finished
        }
        guard first else { return }
        session.invalidateAndCancel()
        delegate.transportDidClose(code: code, reason: reason, error: error)
    }

    /// URLSession buffers sends itself and has no watermark to report: never above it. A failed
    /// send fails the task, which the receive loop reports.
    func write(_ message: WebSocketMessage) -> Bool {
        let outgoing: URLSessionWebSocketTask.Message
        switch message {
        case .string(let text): outgoing = .string(text)
        case .data(let data): outgoing = .data(data)
        }
        task.send(outgoing) { _ in }
        return false
    }

    func ping(_ payload: [UInt8]) {
        task.sendPing { [weak self] error in
            if error == nil { self?.delegate.transportDidReceivePong(payload) }
        }
    }

    func close(code: WebSocketCloseCode, reason: String) {
        let closeCode = URLSessionWebSocketTask.CloseCode(rawValue: Int(code.rawValue)) ?? .normalClosure
        task.cancel(with: closeCode, reason: Data(reason.utf8))
    }

    func abort() {
        task.cancel()
    }
}
#endif
