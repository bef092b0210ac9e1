// Record and replay are served by a target of their own (the `duplex` CLI uses it without the
// chat server); their configurations are part of the server's API.
@_exported public import DuplexRecordReplay
