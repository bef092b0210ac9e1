// `FaultProxy` lives in a target of its own (it needs no HTTP server); `import DuplexTesting`
// still brings it.
@_exported public import DuplexFaultProxy

// Scripted routes (`ScriptedRoute`, `WebSocketScript`, `SSEScript`) and their journal are the
// server's: a test that imports DuplexTesting writes them without importing DuplexServer.
@_exported public import DuplexServer

// The wire's types (`ServerSentEvent`, `WebSocketCloseCode`): a test publishes events on a
// simulated server without importing DuplexSchema.
@_exported public import DuplexSchema
