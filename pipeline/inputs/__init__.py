"""Reading the input: one module per input kind (folders, CSVs, a config class) and the archives
that folders may be (tar, zip, gzip)."""
