// zlib is a system library; this file gives the target a source to compile.
