"""The package's version, in a module of its own so the data model can stamp results without importing the package's API."""

__version__ = "0.1.0"
