"""A run as a record: its description and its saved file."""
