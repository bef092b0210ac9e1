// `FaultProxy` lives in a target of its own, so that the `duplex` CLI can use it without linking
// the server; `import DuplexTesting` still brings it.
@_exported public import DuplexFaultProxy
