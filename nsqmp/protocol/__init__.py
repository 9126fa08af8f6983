"""NSQ wire facts shared by every role: frame types, error codes, names, message encoding."""
