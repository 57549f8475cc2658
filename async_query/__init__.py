"""The plugin: REST API, sessions and launchers of the async query service."""

__version__ = "0.1.0"
