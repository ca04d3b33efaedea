"""The shell every daemon shares: the web server, process life, flags, logging, retries."""
