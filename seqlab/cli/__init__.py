"""seqlab command line: thin wrappers over library functions (DESIGN §1)."""
