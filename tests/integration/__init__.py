"""Home Assistant integration tests (phcc)."""
