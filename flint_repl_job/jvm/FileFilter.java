// A file relation restricted to some of its files, built as Catalyst nodes in one call.
//
// The acceleration (docs/acceleration.md) replaces a table's LogicalRelation by the same relation
// under a filter on its `_metadata.file_path`, which Spark applies to the file listing before it
// opens any file. Built from Python through DataFrames, that plan cost two analyses and a few
// dozen gateway round trips (about 10 ms a query); here it is the nodes Spark's analyser makes of
// `relation.filter(_metadata.file_path IN (...))`, already resolved. Compiled inside the job's JVM
// by the Janino compiler that ships with Spark (flint_repl_job/jvm/__init__.py): nothing to build.
//
// Janino compiles a subset of Java: no generics, lambdas or enhanced for over Scala collections.
package asyncquery.jvm;

import java.util.HashSet;

import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.GetStructField;
import org.apache.spark.sql.catalyst.expressions.InSet;
import org.apache.spark.sql.catalyst.expressions.Not;
import org.apache.spark.sql.catalyst.plans.logical.Filter;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Project;
import org.apache.spark.sql.execution.datasources.LogicalRelation;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;

public final class FileFilter {

    /** Thrown where the relation has no `_metadata.file_path` to filter on. */
    public static final class Unsupported extends RuntimeException {
        public Unsupported(String what) { super(what); }
    }

    /**
     * ``relation`` reading only the files in ``joined`` (``keep``) or all but them: the paths
     * joined by ``separator`` (a character no path holds). The plan outputs the relation's own
     * attributes (same ids), so the rest of a query refers to it as it did to the relation.
     */
    public LogicalPlan restrict(LogicalRelation relation, String joined, String separator, boolean keep) {
        Attribute metadata = metadataColumn(relation);
        LogicalPlan withMetadata = relation.withMetadataColumns();
        StructType type = (StructType) metadata.dataType();
        int ordinal = type.fieldIndex("file_path");
        Expression path = new GetStructField(metadata, ordinal, scala.Option.apply("file_path"));
        HashSet paths = new HashSet();
        String[] parts = joined.split(java.util.regex.Pattern.quote(separator), -1);
        for (int i = 0; i < parts.length; i++) {
            if (parts[i].length() > 0) paths.add(UTF8String.fromString(parts[i]));
        }
        scala.collection.immutable.Set set = scala.jdk.javaapi.CollectionConverters.asScala(paths).toSet();
        Expression condition = new InSet(path, set);
        if (!keep) condition = new Not(condition);
        return new Project((scala.collection.immutable.Seq) relation.output(), new Filter(condition, withMetadata));
    }

    /** The relation's hidden ``_metadata`` column (a column of the table by that name is not it). */
    private static Attribute metadataColumn(LogicalRelation relation) {
        scala.collection.immutable.Seq output = relation.metadataOutput();
        for (int i = 0; i < output.length(); i++) {
            Attribute attribute = (Attribute) output.apply(i);
            if ("_metadata".equals(attribute.name()) && attribute.dataType() instanceof StructType) {
                return attribute;
            }
        }
        throw new Unsupported("no _metadata column");
    }
}
