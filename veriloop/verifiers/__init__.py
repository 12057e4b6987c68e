"""Verifiers (tests, Dafny, Nagini, Verus), the spec guard and the verification cache."""
