"""Harness shared by the tests, the benchmarks and the demo: real servers on loopback."""
