"""One trial: the harness that runs it in an isolated child process, the protocol between them, and
what runs inside the child (the timing loop, the consumer, the copy to the device, the probes of
memory, CPU and GPU)."""
