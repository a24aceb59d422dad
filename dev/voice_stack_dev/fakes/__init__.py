"""Every fake in the project, one home: only for what a real server cannot be made to do on demand
(faults, timeouts, malformed replies, fixed figures for a snapshot). `integration`: the servers
the Home Assistant integration talks to (llama-server, a key-checking proxy in front of a real
llama-server, the gateway's /health and /metrics), used by tests/integration. `speech`: an
OpenAI-compatible speech server, used by tests/gateway in process and by the gateway benchmarks
as a paced process of its own."""
