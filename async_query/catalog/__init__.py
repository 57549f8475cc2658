"""The catalog read model: OpenSearch Dashboards' browse statements answered from each datasource's
catalog without a Spark job (docs/catalog.md).

- :mod:`.statements`: which statements, in which forms;
- :mod:`.locate`: where a datasource's catalog is (from what its jobs are given);
- :mod:`.readers`: the Hive Metastore (Thrift) and AWS Glue (boto3) readers;
- :mod:`.tables`, :mod:`.spark_types`: a table as Spark reads it back, and printed as Spark prints it;
- :mod:`.readmodel`: the cache, bounded in bytes, and its invalidation;
- :mod:`.keepwarm`: the background refresh of the listings browsed recently.
"""
