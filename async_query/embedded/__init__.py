"""The child processes of the embedded default: the index server and the Hive Metastore."""
