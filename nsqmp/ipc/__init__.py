"""Inter-process plumbing: shared-memory segments, SPSC rings, doorbells, record codec."""
