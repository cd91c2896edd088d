"""seglog: the client side of the seglog log-segment storage service."""
