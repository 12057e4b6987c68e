"""Performance benchmarks run by `veriloop bench NAME`; each measures its baseline in the same
run and prints one JSON object with the ratios."""
