// What a statement reads and writes of the catalog, as Spark resolved it, in one call.
//
// The job's check (docs/validation.md, "What the catalog holds") judges every table, view and
// partition a statement reaches by what the catalog holds for it, whoever wrote it there. This
// class walks an analysed plan (its children, the plans inside its expressions and its fields) and
// writes, as JSON, each catalog table it meets (its location, provider, storage and properties; a
// view's text and captured settings), the partitions of each partitioned table (as the catalog
// lists them now, or as the plan already pruned them), the root paths of each other file relation,
// each other relation's class, and each path a command writes to. The checks themselves are the
// job's Python (flint_repl_job/stored.py): this class only reads.
//
// A query's partitions are otherwise listed from the catalog late (when Spark optimizes the query,
// or when it runs), after the check: ``pin`` lists them for an optimized plan, and, once they are
// checked, puts them into the plan, so the partitions checked are the partitions read, whatever
// the catalog says meanwhile (and no file of theirs is listed before the check).
//
// Compiled inside the job's JVM by the Janino compiler that ships with Spark
// (flint_repl_job/jvm/__init__.py): nothing to build. Janino compiles a subset of Java: no
// generics, lambdas or enhanced for over Scala collections.
package asyncquery.jvm;

import java.util.ArrayDeque;
import java.util.HashSet;
import java.util.IdentityHashMap;

import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.catalyst.TableIdentifier;
import org.apache.spark.sql.catalyst.catalog.CatalogStorageFormat;
import org.apache.spark.sql.catalyst.catalog.CatalogTable;
import org.apache.spark.sql.catalyst.catalog.CatalogTablePartition;
import org.apache.spark.sql.catalyst.catalog.HiveTableRelation;
import org.apache.spark.sql.catalyst.catalog.SessionCatalog;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.View;
import org.apache.spark.sql.execution.datasources.CatalogFileIndex;
import org.apache.spark.sql.execution.datasources.HadoopFsRelation;
import org.apache.spark.sql.execution.datasources.LogicalRelation;

public final class StoredTables {

    /** Nodes whose first field is the name of what they create, which is not read (nor there yet). */
    private static final HashSet CREATES = new HashSet(java.util.Arrays.asList(new String[] {
        "CreateViewCommand", "AlterViewAsCommand", "CreateTableLikeCommand", "CreateTableCommand",
        "CreateDataSourceTableCommand",
    }));

    /** The JSON array of what ``plan`` reads and writes of the catalog (see the file's comment);
     *  ``partitions``: whether the catalog's partitions of partitioned tables are listed. */
    public String describe(LogicalPlan plan, org.apache.spark.sql.classic.SparkSession session, boolean partitions) {
        Walk walk = new Walk(catalogOf(session), partitions);
        walk.plan(plan);
        return walk.finish();
    }

    /** The partitions an optimized query would read, listed from the catalog now for each
     *  partitioned table whose partitions Spark would list later (a catalog file index not
     *  pruned by a filter, a Hive relation not pruned), described as ``describe`` does (with the
     *  file relations the optimizer already pruned): check ``json()``, then run ``plan()``. */
    public Pinning pin(LogicalPlan optimized, org.apache.spark.sql.classic.SparkSession session) {
        return new Pinning(optimized, session);
    }

    /** An optimized plan and the partitions listed for it (see ``pin``). */
    public static final class Pinning {
        private final LogicalPlan optimized;
        private final org.apache.spark.sql.classic.SparkSession session;
        /** Per relation node (by identity): the partitions listed for it. */
        private final IdentityHashMap listed = new IdentityHashMap();
        private final String json;

        Pinning(LogicalPlan optimized, org.apache.spark.sql.classic.SparkSession session) {
            this.optimized = optimized;
            this.session = session;
            SessionCatalog catalog = catalogOf(session);
            ArrayDeque pending = new ArrayDeque();
            IdentityHashMap seen = new IdentityHashMap();
            pending.push(optimized);
            while (!pending.isEmpty()) {
                LogicalPlan node = (LogicalPlan) pending.pop();
                if (seen.put(node, Boolean.TRUE) != null) continue;
                CatalogTable table = unpruned(node);
                if (table != null) listed.put(node, catalog.listPartitions(table.identifier(), scala.Option.empty()));
                pushAll(pending, node.children());
                pushAll(pending, node.subqueries());
            }
            Walk walk = new Walk(catalog, false);
            walk.listed = listed;
            walk.plan(optimized);
            json = walk.finish();
        }

        public String json() {
            return json;
        }

        /** The optimized plan reading exactly the partitions listed (their files listed now). */
        public LogicalPlan plan() {
            if (listed.isEmpty()) return optimized;
            return (LogicalPlan) optimized.transformUpWithSubqueries(new Pin(listed, session));
        }
    }

    /** The table of a relation whose partitions Spark would list from the catalog later. */
    private static CatalogTable unpruned(LogicalPlan node) {
        if (node instanceof LogicalRelation) {
            LogicalRelation relation = (LogicalRelation) node;
            if (relation.relation() instanceof HadoopFsRelation
                    && ((HadoopFsRelation) relation.relation()).location() instanceof CatalogFileIndex) {
                CatalogTable table = ((CatalogFileIndex) ((HadoopFsRelation) relation.relation()).location()).table();
                return table.partitionColumnNames().nonEmpty() ? table : null;
            }
        } else if (node instanceof HiveTableRelation) {
            HiveTableRelation hive = (HiveTableRelation) node;
            if (hive.isPartitioned() && !hive.prunedPartitions().isDefined()) return hive.tableMeta();
        }
        return null;
    }

    private static void pushAll(ArrayDeque pending, scala.collection.Seq plans) {
        scala.collection.Iterator it = plans.iterator();
        while (it.hasNext()) {
            Object next = it.next();
            if (next instanceof LogicalPlan) pending.push(next);
        }
    }

    /** Each relation listed replaced by the same relation over its listed partitions. */
    private static final class Pin extends scala.runtime.AbstractPartialFunction {
        private final IdentityHashMap listed;
        private final org.apache.spark.sql.classic.SparkSession session;

        Pin(IdentityHashMap listed, org.apache.spark.sql.classic.SparkSession session) {
            this.listed = listed;
            this.session = session;
        }

        public boolean isDefinedAt(Object node) {
            return listed.containsKey(node);
        }

        public Object applyOrElse(Object node, scala.Function1 otherwise) {
            scala.collection.immutable.Seq partitions = (scala.collection.immutable.Seq) listed.get(node);
            if (partitions == null) return otherwise.apply(node);
            if (node instanceof HiveTableRelation) {
                HiveTableRelation hive = (HiveTableRelation) node;
                return hive.copy(hive.tableMeta(), hive.dataCols(), hive.partitionCols(), hive.tableStats(), scala.Option.apply(partitions));
            }
            LogicalRelation relation = (LogicalRelation) node;
            HadoopFsRelation files = (HadoopFsRelation) relation.relation();
            CatalogTable table = ((CatalogFileIndex) files.location()).table();
            HadoopFsRelation pinned = new HadoopFsRelation(
                index(table, partitions),
                files.partitionSchema(),
                files.dataSchema(),
                files.bucketSpec(),
                files.fileFormat(),
                files.options(),
                files.sparkSession());
            return new LogicalRelation(
                pinned, relation.output(), relation.catalogTable(), relation.isStreaming(), relation.stream());
        }

        /** The file index of ``partitions`` of ``table``, as its catalog file index makes one. */
        private org.apache.spark.sql.execution.datasources.InMemoryFileIndex index(
                CatalogTable table, scala.collection.immutable.Seq partitions) {
            long started = System.nanoTime();
            org.apache.spark.sql.types.StructType schema = table.partitionSchema();
            String zone = session.sessionState().conf().sessionLocalTimeZone();
            org.apache.hadoop.conf.Configuration conf = session.sessionState().newHadoopConf();
            java.util.ArrayList paths = new java.util.ArrayList();
            java.util.ArrayList roots = new java.util.ArrayList();
            scala.collection.Iterator it = partitions.iterator();
            while (it.hasNext()) {
                CatalogTablePartition partition = (CatalogTablePartition) it.next();
                Path path = new Path(partition.location());
                Path qualified;
                try {
                    org.apache.hadoop.fs.FileSystem fs = path.getFileSystem(conf);
                    qualified = path.makeQualified(fs.getUri(), fs.getWorkingDirectory());
                } catch (java.io.IOException e) {
                    throw new RuntimeException(e);
                }
                paths.add(new org.apache.spark.sql.execution.datasources.PartitionPath(partition.toRow(schema, zone), qualified));
                roots.add(qualified);
            }
            org.apache.spark.sql.execution.datasources.PartitionSpec spec =
                new org.apache.spark.sql.execution.datasources.PartitionSpec(schema, seq(paths));
            return new org.apache.spark.sql.execution.datasources.InMemoryFileIndex(
                session,
                seq(roots),
                (scala.collection.immutable.Map) scala.collection.immutable.Map$.MODULE$.empty(),
                scala.Option.apply(schema),
                org.apache.spark.sql.execution.datasources.FileStatusCache.getOrCreate(session),
                scala.Option.apply(spec),
                scala.Option.apply(Long.valueOf(System.nanoTime() - started)));
        }
    }

    private static scala.collection.immutable.Seq seq(java.util.ArrayList items) {
        return scala.jdk.javaapi.CollectionConverters.asScala(items).toList();
    }

    /** The same JSON for the catalog table named ``name`` in ``database`` (null: the current
     *  one), as a statement names it: an empty array for a temporary view or no table. */
    public String describeTable(org.apache.spark.sql.classic.SparkSession session, String database, String name) {
        Walk walk = new Walk(catalogOf(session), true);
        walk.named(new TableIdentifier(name, scala.Option.apply(database)), "name");
        return walk.finish();
    }

    private static SessionCatalog catalogOf(org.apache.spark.sql.classic.SparkSession session) {
        return session.sessionState().catalog();
    }

    /** A relation whose partitions are its file index's root paths, not the catalog's. */
    private static final scala.Option NO_PARTITIONS = new scala.Some("root paths");

    private static final class Walk {
        private final SessionCatalog catalog;
        /** Whether the catalog's partitions of a partitioned table are listed (not only a plan's). */
        private final boolean listPartitions;
        /** Per relation node (by identity): partitions already listed for it (``pin``). */
        IdentityHashMap listed = new IdentityHashMap();
        private final StringBuilder out = new StringBuilder(1024);
        private final IdentityHashMap seen = new IdentityHashMap();
        private final HashSet described = new HashSet();
        private final ArrayDeque pending = new ArrayDeque();

        Walk(SessionCatalog catalog, boolean listPartitions) {
            this.catalog = catalog;
            this.listPartitions = listPartitions;
            out.append('[');
        }

        String finish() {
            out.append(']');
            return out.toString();
        }

        void plan(LogicalPlan root) {
            pending.push(root);
            while (!pending.isEmpty()) {
                LogicalPlan node = (LogicalPlan) pending.pop();
                if (seen.put(node, Boolean.TRUE) != null) continue;
                visit(node);
                push(node.children());
                push(node.innerChildren());
                push(node.subqueries());
            }
        }

        private void push(scala.collection.Seq plans) {
            scala.collection.Iterator it = plans.iterator();
            while (it.hasNext()) {
                Object next = it.next();
                if (next instanceof LogicalPlan) pending.push(next);
            }
        }

        private void visit(LogicalPlan node) {
            String name = node.getClass().getSimpleName();
            if (node instanceof LogicalRelation) {
                relation((LogicalRelation) node, name);
            } else if (node instanceof HiveTableRelation) {
                HiveTableRelation hive = (HiveTableRelation) node;
                scala.Option pruned = listed.containsKey(node) ? scala.Option.apply(listed.get(node)) : hive.prunedPartitions();
                table(hive.tableMeta(), name, false, pruned);
            } else if (node instanceof View) {
                View view = (View) node;
                table(view.desc(), name, view.isTempView(), null);
            } else if (name.equals("ResolvedIdentifier")) {
                resolvedIdentifier(node, name);
            }
            if (node instanceof LogicalRelation || node instanceof HiveTableRelation || node instanceof View) return;
            boolean creates = CREATES.contains(name);
            for (int i = 0; i < node.productArity(); i++) {
                Object value = node.productElement(i);
                if (i == 0 && creates && value instanceof TableIdentifier) continue;
                field(value, name, 0);
            }
        }

        /** A field of a node: a catalog table, a table's name, a v2 table, a path written, a plan. */
        private void field(Object value, String node, int depth) {
            if (value == null || depth > 2) return;
            if (value instanceof scala.Option) {
                scala.Option option = (scala.Option) value;
                if (option.isDefined()) field(option.get(), node, depth + 1);
            } else if (value instanceof CatalogTable) {
                table((CatalogTable) value, node, false, null);
            } else if (value instanceof TableIdentifier) {
                named((TableIdentifier) value, node);
            } else if (value instanceof org.apache.spark.sql.connector.catalog.Table) {
                v2Table((org.apache.spark.sql.connector.catalog.Table) value, node);
            } else if (value instanceof Path) {
                begin("path");
                key("node"); string(node);
                key("path"); string(value.toString());
                end();
            } else if (value instanceof LogicalPlan) {
                if (!seen.containsKey(value)) pending.push(value);
            } else if (value instanceof scala.collection.Iterable && !(value instanceof scala.collection.Map)) {
                scala.collection.Iterator it = ((scala.collection.Iterable) value).iterator();
                while (it.hasNext()) field(it.next(), node, depth + 1);
            }
        }

        private void relation(LogicalRelation node, String name) {
            scala.Option table = node.catalogTable();
            Object relation = node.relation();
            boolean catalogIndex = relation instanceof HadoopFsRelation
                && ((HadoopFsRelation) relation).location() instanceof CatalogFileIndex;
            // A relation over a catalog file index reads the catalog's partitions; any other
            // relation of files reads its root paths (a pinned or pruned table's: its partitions).
            scala.Option partitions = listed.containsKey(node) ? scala.Option.apply(listed.get(node)) : null;
            if (table.isDefined()) table((CatalogTable) table.get(), name, false, catalogIndex ? partitions : NO_PARTITIONS);
            if (relation instanceof HadoopFsRelation) {
                HadoopFsRelation files = (HadoopFsRelation) relation;
                if (catalogIndex) return;
                begin("files");
                key("node"); string(name);
                key("table"); nullable(table.isDefined() ? ((CatalogTable) table.get()).qualifiedName() : null);
                key("format"); string(files.fileFormat().getClass().getName());
                key("paths"); out.append('[');
                scala.collection.Iterator it = files.location().rootPaths().iterator();
                boolean first = true;
                while (it.hasNext()) {
                    if (!first) out.append(',');
                    first = false;
                    string(it.next().toString());
                }
                out.append(']');
                end();
            } else if (!table.isDefined()) {
                begin("relation");
                key("node"); string(name);
                key("class"); string(relation.getClass().getName());
                end();
            }
        }

        private void v2Table(org.apache.spark.sql.connector.catalog.Table table, String node) {
            if (table instanceof org.apache.spark.sql.connector.catalog.V1Table) {
                table(((org.apache.spark.sql.connector.catalog.V1Table) table).v1Table(), node, false, null);
                return;
            }
            java.util.Map properties = table.properties();
            begin("v2");
            key("node"); string(node);
            key("name"); string(table.name());
            key("class"); string(table.getClass().getName());
            key("provider"); nullable(properties == null ? null : (String) properties.get("provider"));
            key("location"); nullable(properties == null ? null : (String) properties.get("location"));
            end();
        }

        private void resolvedIdentifier(LogicalPlan node, String name) {
            Object catalog = node.productElement(0);
            Object identifier = node.productElement(1);
            if (!(catalog instanceof org.apache.spark.sql.connector.catalog.CatalogPlugin)) return;
            if (!(identifier instanceof org.apache.spark.sql.connector.catalog.Identifier)) return;
            if (!"spark_catalog".equals(((org.apache.spark.sql.connector.catalog.CatalogPlugin) catalog).name())) return;
            org.apache.spark.sql.connector.catalog.Identifier id = (org.apache.spark.sql.connector.catalog.Identifier) identifier;
            String[] namespace = id.namespace();
            if (namespace.length != 1) return;
            named(new TableIdentifier(id.name(), scala.Option.apply(namespace[0])), name);
        }

        /** The catalog's table of a name a command holds (not a temporary view). */
        void named(TableIdentifier identifier, String node) {
            try {
                if (catalog.isTempView(identifier) || !catalog.tableExists(identifier)) return;
                table(catalog.getTableRawMetadata(identifier), node, false, null);
            } catch (Exception e) {
                // No such database or table: Spark says so when the statement runs.
            }
        }

        /** A catalog table (or view); ``pruned``: the partitions its relation already holds. */
        private void table(CatalogTable table, String node, boolean temporary, scala.Option pruned) {
            String name = table.qualifiedName();
            if (!described.add(name + "\u0000" + temporary)) return;
            String type = table.tableType().name();
            CatalogStorageFormat storage = table.storage();
            begin("table");
            key("node"); string(node);
            key("name"); string(name);
            key("type"); string(type);
            key("temporary"); out.append(temporary);
            key("provider"); option(table.provider());
            key("location"); option(storage.locationUri());
            storage(storage);
            key("properties"); map(table.properties());
            key("partitioned"); out.append(table.partitionColumnNames().nonEmpty());
            if ("VIEW".equals(type)) {
                key("view"); option(table.viewText());
                key("viewConf"); map(table.viewSQLConfigs());
                key("viewNamespace"); strings(table.viewCatalogAndNamespace());
            } else if (!storage.locationUri().isDefined()) {
                key("defaultLocation"); defaultLocation(table);
            }
            if (!"VIEW".equals(type) && table.partitionColumnNames().nonEmpty() && pruned != NO_PARTITIONS) {
                key("partitions"); partitions(table, pruned);
            }
            end();
        }

        private void defaultLocation(CatalogTable table) {
            try {
                string(catalog.defaultTablePath(table.identifier()).toString());
            } catch (Exception e) {
                out.append("null");
            }
        }

        /** The partitions of a partitioned table: those a relation already pruned, else the
         *  catalog's (null where the catalog keeps none: Spark discovers them below the table). */
        private void partitions(CatalogTable table, scala.Option pruned) {
            scala.collection.Seq found;
            if (pruned != null && pruned.isDefined()) {
                found = (scala.collection.Seq) pruned.get();
            } else if (!listPartitions) {
                out.append("null");
                return;
            } else if ("hive".equalsIgnoreCase(table.provider().isDefined() ? (String) table.provider().get() : "hive")
                    || table.tracksPartitionsInCatalog()) {
                try {
                    found = catalog.listPartitions(table.identifier(), scala.Option.empty());
                } catch (Exception e) {
                    out.append("null");
                    return;
                }
            } else {
                out.append("null");
                return;
            }
            out.append('[');
            scala.collection.Iterator it = found.iterator();
            boolean first = true;
            while (it.hasNext()) {
                CatalogTablePartition partition = (CatalogTablePartition) it.next();
                if (!first) out.append(',');
                first = false;
                out.append('{');
                out.append("\"spec\":");
                map(partition.spec());
                out.append(",\"location\":");
                option(partition.storage().locationUri());
                storage(partition.storage());
                out.append('}');
            }
            out.append(']');
        }

        private void storage(CatalogStorageFormat storage) {
            key("serde"); option(storage.serde());
            key("inputFormat"); option(storage.inputFormat());
            key("outputFormat"); option(storage.outputFormat());
            key("storage"); map(storage.properties());
        }

        // -- JSON -----------------------------------------------------------------------------------

        private boolean firstItem = true;

        private void begin(String kind) {
            if (!firstItem) out.append(',');
            firstItem = false;
            out.append("{\"kind\":");
            string(kind);
        }

        private void end() {
            out.append('}');
        }

        private void key(String key) {
            out.append(',');
            string(key);
            out.append(':');
        }

        private void option(scala.Option value) {
            nullable(value.isDefined() ? value.get().toString() : null);
        }

        private void nullable(String value) {
            if (value == null) out.append("null");
            else string(value);
        }

        private void strings(scala.collection.Seq strings) {
            out.append('[');
            scala.collection.Iterator it = strings.iterator();
            boolean first = true;
            while (it.hasNext()) {
                if (!first) out.append(',');
                first = false;
                string(String.valueOf(it.next()));
            }
            out.append(']');
        }

        private void map(scala.collection.Map map) {
            out.append('{');
            scala.collection.Iterator it = map.iterator();
            boolean first = true;
            while (it.hasNext()) {
                scala.Tuple2 entry = (scala.Tuple2) it.next();
                if (!first) out.append(',');
                first = false;
                string(String.valueOf(entry._1()));
                out.append(':');
                string(String.valueOf(entry._2()));
            }
            out.append('}');
        }

        private void string(String s) {
            out.append('"');
            for (int i = 0; i < s.length(); i++) {
                char c = s.charAt(i);
                if (c == '"' || c == '\\') {
                    out.append('\\').append(c);
                } else if (c < 0x20) {
                    out.append("\\u00");
                    out.append(Character.forDigit((c >> 4) & 0xF, 16)).append(Character.forDigit(c & 0xF, 16));
                } else {
                    out.append(c);
                }
            }
            out.append('"');
        }
    }
}
