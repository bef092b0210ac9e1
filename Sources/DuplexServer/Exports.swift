// Record and replay are served by a target of their own (the `duplex` CLI uses it without the
// chat server); their configurations are part of the server's API.
@_exported public import DuplexRecordReplay

// Where the chat rooms are kept: chosen in the server's configuration, declared beside the
// stores (so a store in a library of its own, as `DuplexPostgres`, needs no server).
@_exported public import struct DuplexChat.ChatStoreConfiguration

// Routes of the user's own protocol are a route set of their own (they need the host, not the
// server); they and their journal are part of the server's API.
@_exported public import DuplexScripted
