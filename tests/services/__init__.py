"""Launchers for the real servers the integration tests run against (see README.md)."""
