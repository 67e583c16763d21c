"""Trainer-side recovery pieces: data-plane barrier and cut, recovery ledger, SQLite data plane."""
