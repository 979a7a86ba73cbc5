"""The package version, importable from anywhere without importing the extension."""

__version__ = "0.1.0"
