"""A Wyoming fuzzer: a real gateway on loopback, attacked by generated bad clients while a
well-behaved one (Home Assistant's requests) is timed beside them. bench/wyoming_fuzz.py runs it;
tests/gateway/test_wyoming_fuzz.py runs it once in the suite."""
