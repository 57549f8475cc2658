// The JSON form of a Spark plan, as TreeNode.toJSON writes it, without its cost.
//
// Spark's own toJSON asks Scala reflection for the constructor parameter names of every node and
// of every product value it meets, and keeps none of the answers: about 0.3 ms a node. This class
// writes the same JSON (the same objects, fields, values and order; docs/validation.md, "The job's
// check") and reads each class's names once, from its class file where it can. It is compiled
// inside the job's JVM by the Janino compiler that ships with Spark (flint_repl_job/jvm/__init__.py):
// nothing to build.
//
// Janino compiles a subset of Java: no generics, lambdas or enhanced for over Scala collections.
package asyncquery.jvm;

import java.lang.reflect.Constructor;
import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.lang.reflect.Parameter;
import java.util.Arrays;
import java.util.concurrent.ConcurrentHashMap;

import org.apache.spark.sql.catalyst.trees.TreeNode;

public final class PlanJson {

    /** Per class: its constructor parameter names, as Spark reads them (String[]). */
    private static final ConcurrentHashMap NAMES = new ConcurrentHashMap();
    /** Per node class: whether it writes its own fields (Boolean; Literal does). */
    private static final ConcurrentHashMap OWN_FIELDS = new ConcurrentHashMap();

    /** Thrown where Spark's own writer would fail or write what this one does not know. */
    public static final class Unsupported extends RuntimeException {
        public Unsupported(String what) { super(what); }
    }

    /** The JSON array of the nodes of the tree under ``root``, parents before their children. */
    public String write(TreeNode root) {
        try {
            return toJson(root);
        } catch (Unsupported e) {
            throw e;
        } catch (RuntimeException e) {
            throw new Unsupported(e.toString());
        }
    }

    static String toJson(TreeNode root) {
        StringBuilder out = new StringBuilder(8192);
        tree(root, out);
        return out.toString();
    }

    private static void tree(TreeNode root, StringBuilder out) {
        out.append('[');
        nodes(root, out, true);
        out.append(']');
    }

    private static void nodes(TreeNode node, StringBuilder out, boolean first) {
        if (!first) out.append(',');
        scala.collection.immutable.Seq children = node.children();
        out.append("{\"class\":");
        string(node.getClass().getName(), out);
        out.append(",\"num-children\":").append(children.length());
        fields(node, children, out);
        out.append('}');
        scala.collection.Iterator it = children.iterator();
        while (it.hasNext()) nodes((TreeNode) it.next(), out, false);
    }

    private static void fields(TreeNode node, scala.collection.immutable.Seq children, StringBuilder out) {
        if (ownFields(node.getClass())) {
            scala.collection.Iterator it = node.jsonFields().iterator();
            while (it.hasNext()) {
                scala.Tuple2 field = (scala.Tuple2) it.next();
                int mark = out.length();
                out.append(',');
                string((String) field._1(), out);
                out.append(':');
                if (!jvalue(field._2(), out)) out.setLength(mark);
            }
            return;
        }
        String[] names = names(node.getClass());
        scala.collection.immutable.Seq other = node.otherCopyArgs();
        if (names.length != node.productArity() + other.length()) {
            throw new Unsupported("fields of " + node.getClass().getName());
        }
        scala.collection.immutable.Set contained = node.containsChild();
        ChildIndex index = new ChildIndex(children);
        for (int i = 0; i < names.length; i++) {
            Object value = i < node.productArity()
                ? node.productElement(i) : other.apply(i - node.productArity());
            int mark = out.length();
            out.append(',');
            string(names[i], out);
            out.append(':');
            if (value instanceof TreeNode && contained.contains(value)) {
                out.append(index.of(value));
            } else if (value instanceof scala.collection.immutable.Seq && allIn((scala.collection.immutable.Seq) value, contained)) {
                out.append('[');
                scala.collection.Iterator it = ((scala.collection.immutable.Seq) value).iterator();
                boolean first = true;
                while (it.hasNext()) {
                    if (!first) out.append(',');
                    first = false;
                    out.append(index.of(it.next()));
                }
                out.append(']');
            } else if (!value(value, out)) {
                out.setLength(mark);
            }
        }
    }

    /** ``children.indexOf(child)``, as Spark asks it, without its cost for a node of many
     * children (an IN list of thousands of values): the first index of an equal child. */
    private static final class ChildIndex {
        private final scala.collection.immutable.Seq children;
        private final boolean few;
        private java.util.HashMap first;

        ChildIndex(scala.collection.immutable.Seq children) {
            this.children = children;
            this.few = children.lengthCompare(16) <= 0;  // a List's length is a walk
        }

        int of(Object child) {
            if (few) return children.indexOf(child);
            if (first == null) {
                first = new java.util.HashMap();
                scala.collection.Iterator it = children.iterator();
                for (int i = 0; it.hasNext(); i++) {
                    Object next = it.next();
                    if (!first.containsKey(next)) first.put(next, Integer.valueOf(i));
                }
            }
            Integer found = (Integer) first.get(child);
            return found == null ? -1 : found.intValue();
        }
    }

    private static boolean allIn(scala.collection.immutable.Seq seq, scala.collection.immutable.Set set) {
        scala.collection.Iterator it = seq.iterator();
        while (it.hasNext()) if (!set.contains(it.next())) return false;
        return true;
    }

    /** One value as Spark's ``parseToJson`` writes it; false for nothing written (a None). */
    private static boolean value(Object obj, StringBuilder out) {
        if (obj instanceof Boolean) { out.append(((Boolean) obj).booleanValue()); return true; }
        if (obj instanceof Byte || obj instanceof Short || obj instanceof Integer || obj instanceof Long) {
            out.append(((Number) obj).longValue());
            return true;
        }
        if (obj instanceof Float) { number((double) ((Float) obj).floatValue(), out); return true; }
        if (obj instanceof Double) { number(((Double) obj).doubleValue(), out); return true; }
        if (obj instanceof scala.math.BigInt) { out.append(obj.toString()); return true; }
        if (obj == null) { out.append("null"); return true; }
        if (obj instanceof String) { string((String) obj, out); return true; }
        if (obj instanceof java.util.UUID) { string(obj.toString(), out); return true; }
        if (obj instanceof org.apache.spark.sql.types.DataType) {
            out.append(((org.apache.spark.sql.types.DataType) obj).json());
            return true;
        }
        if (obj instanceof org.apache.spark.sql.types.Metadata) { out.append("{}"); return true; }
        if (obj instanceof Class) { string(((Class) obj).getName(), out); return true; }
        if (obj instanceof org.apache.spark.storage.StorageLevel) {
            org.apache.spark.storage.StorageLevel s = (org.apache.spark.storage.StorageLevel) obj;
            out.append("{\"useDisk\":").append(s.useDisk()).append(",\"useMemory\":").append(s.useMemory())
                .append(",\"useOffHeap\":").append(s.useOffHeap()).append(",\"deserialized\":")
                .append(s.deserialized()).append(",\"replication\":").append(s.replication()).append('}');
            return true;
        }
        if (obj instanceof TreeNode) { tree((TreeNode) obj, out); return true; }
        if (obj instanceof scala.Option) {
            scala.Option option = (scala.Option) obj;
            return option.isDefined() && value(option.get(), out);
        }
        if (obj instanceof scala.collection.immutable.Seq) return seq((scala.collection.immutable.Seq) obj, out);
        if (obj instanceof scala.collection.Map) { out.append("null"); return true; }
        if (obj.getClass().getName().endsWith("$")) {
            out.append("{\"object\":");
            string(obj.getClass().getName(), out);
            out.append('}');
            return true;
        }
        if (obj instanceof scala.Product && converted((scala.Product) obj)) {
            product((scala.Product) obj, out);
            return true;
        }
        out.append("null");
        return true;
    }

    private static boolean seq(scala.collection.immutable.Seq seq, StringBuilder out) {
        if (all(seq, org.apache.spark.sql.catalyst.plans.physical.Partitioning.class)
            || all(seq, org.apache.spark.sql.types.DataType.class) || all(seq, scala.Product.class)) {
            out.append('[');
            scala.collection.Iterator it = seq.iterator();
            boolean first = true;
            while (it.hasNext()) {
                int mark = out.length();
                if (!first) out.append(',');
                if (value(it.next(), out)) first = false;
                else out.setLength(mark);
            }
            out.append(']');
            return true;
        }
        if (seq.length() > 0 && seq.head() instanceof String) {
            string(org.apache.spark.sql.catalyst.util.package$.MODULE$.truncatedString(
                seq, "[", ", ", "]", org.apache.spark.sql.internal.SQLConf$.MODULE$.get().maxToStringFields()), out);
            return true;
        }
        out.append("null");
        return true;
    }

    private static boolean all(scala.collection.immutable.Seq seq, Class type) {
        scala.collection.Iterator it = seq.iterator();
        while (it.hasNext()) if (!type.isInstance(it.next())) return false;
        return true;
    }

    /** Spark's ``shouldConvertToJson``: the products it writes field by field. */
    private static boolean converted(scala.Product p) {
        if (p instanceof org.apache.spark.sql.catalyst.expressions.ExprId
            || p instanceof org.apache.spark.sql.types.StructField
            || p instanceof org.apache.spark.sql.catalyst.CatalystIdentifier
            || p instanceof org.apache.spark.sql.catalyst.AliasIdentifier
            || p instanceof org.apache.spark.sql.catalyst.plans.JoinType
            || p instanceof org.apache.spark.sql.catalyst.catalog.BucketSpec
            || p instanceof org.apache.spark.sql.catalyst.catalog.CatalogTable
            || p instanceof org.apache.spark.sql.catalyst.plans.physical.Partitioning
            || p instanceof org.apache.spark.sql.catalyst.catalog.FunctionResource
            || p instanceof org.apache.spark.sql.catalyst.plans.physical.BroadcastMode
            || p instanceof org.apache.spark.sql.catalyst.catalog.CatalogTableType
            || p instanceof org.apache.spark.sql.catalyst.catalog.CatalogStorageFormat) {
            return true;
        }
        scala.collection.Iterator it = p.productIterator();
        while (it.hasNext()) if (it.next() instanceof TreeNode) return true;
        return false;
    }

    private static void product(scala.Product p, StringBuilder out) {
        String[] names = names(p.getClass());
        Object[] values = new Object[names.length];
        if (p.productArity() == names.length) {
            for (int i = 0; i < names.length; i++) values[i] = p.productElement(i);
        } else {
            try {
                for (int i = 0; i < names.length; i++) {
                    Field field = p.getClass().getDeclaredField(names[i]);
                    field.setAccessible(true);
                    values[i] = field.get(p);
                }
            } catch (Exception e) {
                throw new Unsupported("fields of " + p.getClass().getName());
            }
        }
        out.append("{\"product-class\":");
        string(p.getClass().getName(), out);
        for (int i = 0; i < names.length; i++) {
            int mark = out.length();
            out.append(',');
            string(names[i], out);
            out.append(':');
            if (!value(values[i], out)) out.setLength(mark);
        }
        out.append('}');
    }

    /** A json4s value, as json4s renders it compactly; false for JNothing. */
    private static boolean jvalue(Object v, StringBuilder out) {
        if (v instanceof org.json4s.JObject) {
            out.append('{');
            scala.collection.Iterator it = ((org.json4s.JObject) v).obj().iterator();
            boolean first = true;
            while (it.hasNext()) {
                scala.Tuple2 field = (scala.Tuple2) it.next();
                int mark = out.length();
                if (!first) out.append(',');
                string((String) field._1(), out);
                out.append(':');
                if (jvalue(field._2(), out)) first = false;
                else out.setLength(mark);
            }
            out.append('}');
            return true;
        }
        if (v instanceof org.json4s.JArray) {
            out.append('[');
            scala.collection.Iterator it = ((org.json4s.JArray) v).arr().iterator();
            boolean first = true;
            while (it.hasNext()) {
                int mark = out.length();
                if (!first) out.append(',');
                if (jvalue(it.next(), out)) first = false;
                else out.setLength(mark);
            }
            out.append(']');
            return true;
        }
        if (v instanceof org.json4s.JString) { string(((org.json4s.JString) v).s(), out); return true; }
        if (v instanceof org.json4s.JInt) { out.append(((org.json4s.JInt) v).num().toString()); return true; }
        if (v instanceof org.json4s.JLong) { out.append(((org.json4s.JLong) v).num()); return true; }
        if (v instanceof org.json4s.JDouble) { number(((org.json4s.JDouble) v).num(), out); return true; }
        if (v instanceof org.json4s.JDecimal) { out.append(((org.json4s.JDecimal) v).num().toString()); return true; }
        if (v instanceof org.json4s.JBool) { out.append(((org.json4s.JBool) v).value()); return true; }
        if (v == org.json4s.JNull$.MODULE$) { out.append("null"); return true; }
        if (v == org.json4s.JNothing$.MODULE$) return false;
        throw new Unsupported("a JSON value " + (v == null ? "null" : v.getClass().getName()));
    }

    private static void number(double d, StringBuilder out) {
        if (Double.isNaN(d) || Double.isInfinite(d)) throw new Unsupported("a number " + d);
        out.append(d);
    }

    private static void string(String s, StringBuilder out) {
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

    private static String[] names(Class type) {
        String[] found = (String[]) NAMES.get(type);
        if (found == null) {
            found = declaredNames(type);
            if (found == null) found = scalaNames(type);
            NAMES.put(type, found);
        }
        return found;
    }

    /**
     * The parameter names of ``type``'s primary constructor as its class file records them (the
     * Scala compiler writes them), or null where the constructor or a name is not certain. Scala
     * reflection answers those: its first use in a JVM costs about a CPU-second (docs/job.md,
     * "Start-up of local jobs").
     */
    public static String[] declaredNames(Class type) {
        Constructor primary = primaryConstructor(type);
        if (primary == null) return null;
        Parameter[] parameters = primary.getParameters();
        String[] found = new String[parameters.length];
        for (int i = 0; i < parameters.length; i++) {
            // A '$' is an encoded symbol or a compiler's own parameter (an inner class's outer).
            if (!parameters[i].isNamePresent() || parameters[i].getName().indexOf('$') >= 0) return null;
            found[i] = parameters[i].getName();
        }
        return found;
    }

    /** The one constructor, or the one a case class's copy method mirrors; null when unsure. */
    private static Constructor primaryConstructor(Class type) {
        Constructor[] all = type.getDeclaredConstructors();
        if (all.length == 1) return all[0];
        Method copy = null;
        Method[] methods = type.getDeclaredMethods();
        for (int i = 0; i < methods.length; i++) {
            if (methods[i].getName().equals("copy") && !methods[i].isBridge() && !methods[i].isSynthetic()) {
                if (copy != null) return null;
                copy = methods[i];
            }
        }
        if (copy == null) return null;
        Constructor match = null;
        for (int i = 0; i < all.length; i++) {
            if (Arrays.equals(all[i].getParameterTypes(), copy.getParameterTypes())) {
                if (match != null) return null;
                match = all[i];
            }
        }
        return match;
    }

    private static String[] scalaNames(Class type) {
        scala.collection.immutable.Seq names =
            org.apache.spark.sql.catalyst.ScalaReflection$.MODULE$.getConstructorParameterNames(type);
        String[] found = new String[names.length()];
        for (int i = 0; i < found.length; i++) found[i] = (String) names.apply(i);
        return found;
    }

    private static boolean ownFields(Class type) {
        Boolean own = (Boolean) OWN_FIELDS.get(type);
        if (own == null) {
            try {
                Method method = type.getMethod("jsonFields", new Class[0]);
                own = Boolean.valueOf(method.getDeclaringClass() != TreeNode.class);
            } catch (NoSuchMethodException e) {
                own = Boolean.FALSE;
            }
            OWN_FIELDS.put(type, own);
        }
        return own.booleanValue();
    }
}
