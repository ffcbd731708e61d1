"""One module per `hlopt.bcoo.*` op (or per family of ops that share their lowering), each
defining `RECORDS`; `hlopt.passes.sparse.bcoo` registers every module found here."""
