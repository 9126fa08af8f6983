"""Append-only mmap'd segment files. Imports nothing else of nsqmp."""
