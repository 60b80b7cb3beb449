"""Spark adapters: the local session, the Python data sources and the writers. No algorithm here."""
