// `FaultProxy` lives in a target of its own (it needs no HTTP server); `import DuplexTesting`
// still brings it.
@_exported public import DuplexFaultProxy
