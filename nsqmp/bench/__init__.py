"""Load generators: `nsqmp bench writer|reader|ring`."""
