"""End-to-end tests: the demo and the browser against real servers."""
