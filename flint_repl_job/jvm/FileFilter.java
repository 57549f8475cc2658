// A file relation restricted to some of its files, built in one call.
//
// The acceleration (docs/acceleration.md) replaces a table's LogicalRelation by the same relation
// whose file index lists only the files the skipping index keeps: the table's own index, asked as
// before (its cached listing, its partition pruning), with the other files left out of what it
// answers. Spark then plans the scan over the kept files alone, as it would a table that held only
// them. Compiled inside the job's JVM by the Janino compiler that ships with Spark
// (flint_repl_job/jvm/__init__.py): nothing to build. The class lives only in the driver's JVM,
// which is the only place a file index is used: a scan's tasks carry the files to read, never
// the index that listed them.
//
// Janino compiles a subset of Java: no generics, lambdas or enhanced for over Scala collections.
package asyncquery.jvm;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.regex.Pattern;

import org.apache.spark.sql.execution.datasources.FileIndex;
import org.apache.spark.sql.execution.datasources.FileStatusWithMetadata;
import org.apache.spark.sql.execution.datasources.HadoopFsRelation;
import org.apache.spark.sql.execution.datasources.LogicalRelation;
import org.apache.spark.sql.execution.datasources.PartitionDirectory;
import org.apache.spark.sql.types.StructType;

public final class FileFilter {

    /** Thrown where the relation is not one read from files through a file index. */
    public static final class Unsupported extends RuntimeException {
        public Unsupported(String what) { super(what); }
    }

    /** ``scheme:///x`` as ``scheme:/x``: the one spelling the acceleration compares (files.py). */
    private static final Pattern EMPTY_AUTHORITY = Pattern.compile("^([A-Za-z][A-Za-z0-9+.-]*):///");

    static String spelled(String uri) {
        return EMPTY_AUTHORITY.matcher(uri).replaceFirst("$1:/");
    }

    /**
     * ``relation`` reading only the files in ``joined`` (``keep``) or all but them: the paths
     * joined by ``separator`` (a character no path holds), spelled as the acceleration's listing
     * spells them. The relation keeps its output attributes (same ids), so the rest of a query
     * refers to it as it did before.
     */
    public LogicalRelation restrict(LogicalRelation relation, String joined, String separator, boolean keep) {
        if (!(relation.relation() instanceof HadoopFsRelation)) {
            throw new Unsupported("not a relation of files");
        }
        HadoopFsRelation files = (HadoopFsRelation) relation.relation();
        HashSet paths = new HashSet();
        String[] parts = joined.split(Pattern.quote(separator), -1);
        for (int i = 0; i < parts.length; i++) {
            if (parts[i].length() > 0) paths.add(parts[i]);
        }
        HadoopFsRelation restricted = new HadoopFsRelation(
            new KeptFiles(files.location(), paths, keep),
            files.partitionSchema(),
            files.dataSchema(),
            files.bucketSpec(),
            files.fileFormat(),
            files.options(),
            files.sparkSession());
        return new LogicalRelation(
            restricted, relation.output(), relation.catalogTable(), relation.isStreaming(), relation.stream());
    }

    /** A table's file index answering only the kept files (or all but the named ones). */
    public static final class KeptFiles implements FileIndex {
        private final FileIndex base;
        private final HashSet paths;
        private final boolean keep;

        KeptFiles(FileIndex base, HashSet paths, boolean keep) {
            this.base = base;
            this.paths = paths;
            this.keep = keep;
        }

        /** Whether the file at ``uri`` (as a path's URI or ``inputFiles`` writes it) is read. */
        private boolean wanted(String uri) {
            return paths.contains(spelled(uri)) == keep;
        }

        public scala.collection.immutable.Seq listFiles(
                scala.collection.immutable.Seq partitionFilters, scala.collection.immutable.Seq dataFilters) {
            ArrayList directories = new ArrayList();
            scala.collection.Iterator listed = base.listFiles(partitionFilters, dataFilters).iterator();
            while (listed.hasNext()) {
                PartitionDirectory directory = (PartitionDirectory) listed.next();
                ArrayList kept = new ArrayList();
                scala.collection.Iterator statuses = directory.files().iterator();
                while (statuses.hasNext()) {
                    FileStatusWithMetadata status = (FileStatusWithMetadata) statuses.next();
                    if (wanted(status.getPath().toUri().toString())) kept.add(status);
                }
                if (!kept.isEmpty()) directories.add(new PartitionDirectory(directory.values(), seq(kept)));
            }
            return seq(directories);
        }

        public String[] inputFiles() {
            String[] all = base.inputFiles();
            ArrayList kept = new ArrayList();
            for (int i = 0; i < all.length; i++) {
                if (wanted(all[i])) kept.add(all[i]);
            }
            return (String[]) kept.toArray(new String[kept.size()]);
        }

        public scala.collection.immutable.Seq rootPaths() { return base.rootPaths(); }

        public void refresh() { base.refresh(); }

        /** The whole table's: what the planner estimated before (a filter did not lower it). */
        public long sizeInBytes() { return base.sizeInBytes(); }

        public StructType partitionSchema() { return base.partitionSchema(); }

        public boolean isTimeTravel() { return base.isTimeTravel(); }

        public scala.Option metadataOpsTimeNs() { return base.metadataOpsTimeNs(); }

        public String toString() {
            return "KeptFiles(" + (keep ? "" : "all but ") + paths.size() + " files of " + base + ")";
        }

        /** Equal for the same files of an equal index: two scans of one table pruned alike are the
         *  same scan to Spark (an exchange over one is reused for the other, as for equal filters). */
        public boolean equals(Object other) {
            if (!(other instanceof KeptFiles)) return false;
            KeptFiles that = (KeptFiles) other;
            return keep == that.keep && paths.equals(that.paths) && base.equals(that.base);
        }

        public int hashCode() {
            return (base.hashCode() * 31 + paths.hashCode()) * 2 + (keep ? 1 : 0);
        }

        private static scala.collection.immutable.Seq seq(ArrayList items) {
            return scala.jdk.javaapi.CollectionConverters.asScala(items).toList();
        }
    }
}
