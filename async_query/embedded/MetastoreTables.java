// The embedded metastore, with a side door for the catalog read model: a database's tables read in
// a handful of SQL queries on the metastore's own database, instead of a dozen per table.
//
// Hive 2.3's get_table_objects_by_name turns each table into its Thrift form one at a time, and
// DataNucleus loads each table's parts lazily: about 1 ms of CPU a table, 2 s for a database of
// 2,000. The read model needs only the table, its storage, SerDe, parameters, columns and partition
// keys, which five queries read for the whole database (docs/catalog.md, "The metastore's bulk
// reads"). LoopbackMetastore.java starts it beside the metastore; it answers on a loopback port of
// its own, to a caller that sends the token the service gave it:
//
//   request:  one line of JSON, {"token": "...", "database": "...", "names": ["t1", ...]}
//             (no names: every table of the database)
//   reply:    one JSON document, {"tables": [...]} or {"error": "..."}, then the connection closes.
//
// Connections are served at once, each on a thread of its own, up to WORKERS at a time (one more is
// closed as soon as it is accepted: the caller reads through Thrift instead); one whose socket is
// not of this process's user or root is closed before a byte is read (as LoopbackMetastore's own
// port); and a caller has REQUEST_DEADLINE_MS to send its whole request line. So a connection
// that sends half a request holds one thread for a second or two, not the port
// (docs/catalog.md, "The metastore's bulk reads").
//
// It is compiled by Janino, which Spark ships (the metastore's class path is Spark's jars): nothing
// to build. Janino compiles a subset of Java: no generics, lambdas or
// try-with-resources.
package asyncquery.jvm;

import java.io.ByteArrayOutputStream;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.SocketTimeoutException;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.SynchronousQueue;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;

public final class MetastoreTables implements Runnable {

    /** The longest request line read (a database and the names of its tables). */
    private static final int MAX_REQUEST = 4 * 1024 * 1024;
    /** Up to this many names are matched in the queries; more, and the database is read whole. */
    private static final int NAMES_IN_QUERY = 200;
    /** Connections served at once. */
    private static final int WORKERS = 16;
    /** How long a caller may take to send its whole request line (the service sends it at once). */
    private static final long REQUEST_DEADLINE_MS = 2000;

    private final ServerSocket server;
    private final byte[] token;
    private final String url;

    private final ThreadPoolExecutor workers =
        new ThreadPoolExecutor(0, WORKERS, 30L, TimeUnit.SECONDS, new SynchronousQueue());
    private final long self = LoopbackMetastore.ownUid();

    private MetastoreTables(ServerSocket server, byte[] token, String url) {
        this.server = server;
        this.token = token;
        this.url = url;
    }

    /** Start answering on the loopback port named by ASYNC_QUERY_TABLES_PORT to callers that send
     * the token of ASYNC_QUERY_TABLES_TOKEN, with the metastore database's JDBC URL from its own
     * setting (javax.jdo.option.ConnectionURL); called by LoopbackMetastore as it starts. */
    public static void startFromEnvironment() throws Exception {
        String port = System.getenv("ASYNC_QUERY_TABLES_PORT");
        String token = System.getenv("ASYNC_QUERY_TABLES_TOKEN");
        String url = System.getProperty("javax.jdo.option.ConnectionURL");
        if (port == null || token == null || token.length() < 16 || url == null) {
            throw new IllegalStateException("no port, token or database URL for the bulk reads");
        }
        ServerSocket server = new ServerSocket(Integer.parseInt(port), 16, InetAddress.getLoopbackAddress());
        Thread thread = new Thread(new MetastoreTables(server, token.getBytes(StandardCharsets.UTF_8), url));
        thread.setName("metastore-tables");
        thread.setDaemon(true);
        thread.start();
    }

    public void run() {
        while (true) {
            Socket socket;
            try {
                socket = server.accept();
            } catch (Exception e) {
                return;
            }
            if (!trusted(socket)) {
                close(socket);
                continue;
            }
            try {
                workers.execute(new Caller(this, socket));
            } catch (RejectedExecutionException e) {
                close(socket);  // every worker busy: the caller reads through Thrift
            }
        }
    }

    /** Whether the caller's socket is of this process's user or of root (the service). */
    private boolean trusted(Socket socket) {
        long owner;
        try {
            owner = LoopbackMetastore.ownerOf(socket.getPort(), server.getLocalPort());
        } catch (Exception e) {
            return false;
        }
        return owner == 0 || (owner >= 0 && owner == self);
    }

    static void close(Socket socket) {
        try {
            socket.close();
        } catch (Exception e) {
            // closed already
        }
    }

    /** One connection, served on a worker. */
    private static final class Caller implements Runnable {
        private final MetastoreTables tables;
        private final Socket socket;

        Caller(MetastoreTables tables, Socket socket) {
            this.tables = tables;
            this.socket = socket;
        }

        public void run() {
            try {
                tables.serve(socket);
            } catch (Throwable e) {
                // one caller's failure: the others are served
            } finally {
                close(socket);
            }
        }
    }

    /** The request line, read within REQUEST_DEADLINE_MS of the connection's start. */
    private static String requestLine(Socket socket) throws Exception {
        long deadline = System.currentTimeMillis() + REQUEST_DEADLINE_MS;
        InputStream in = socket.getInputStream();
        ByteArrayOutputStream line = new ByteArrayOutputStream(4096);
        byte[] chunk = new byte[8192];
        while (true) {
            long left = deadline - System.currentTimeMillis();
            if (left <= 0) throw new SocketTimeoutException("no whole request within " + REQUEST_DEADLINE_MS + " ms");
            socket.setSoTimeout((int) left);
            int n = in.read(chunk);
            if (n < 0) break;
            int end = 0;
            while (end < n && chunk[end] != '\n') end++;
            line.write(chunk, 0, end);
            if (line.size() > MAX_REQUEST) throw new IllegalArgumentException("request too long");
            if (end < n) break;
        }
        return new String(line.toByteArray(), StandardCharsets.UTF_8);
    }

    private void serve(Socket socket) throws Exception {
        socket.setTcpNoDelay(true);
        String line = requestLine(socket);
        socket.setSoTimeout(30000);
        StringBuilder out = new StringBuilder(1 << 16);
        try {
            Request request = Request.parse(line);
            if (!MessageDigest.isEqual(token, request.token.getBytes(StandardCharsets.UTF_8))) {
                out.append("{\"error\":\"unauthorized\"}");
            } else {
                tables(request.database, request.names, out);
            }
        } catch (Exception e) {
            out.setLength(0);
            out.append("{\"error\":");
            Json.string(e.getClass().getName() + ": " + e.getMessage(), out);
            out.append('}');
        }
        OutputStream stream = socket.getOutputStream();
        stream.write(out.toString().getBytes(StandardCharsets.UTF_8));
        stream.flush();
    }

    // -- the tables -----------------------------------------------------------------------------------

    private static final String TABLES =
        "SELECT t.TBL_ID, t.TBL_NAME, t.TBL_TYPE, t.OWNER, t.CREATE_TIME, t.LAST_ACCESS_TIME, "
        + "t.VIEW_ORIGINAL_TEXT, t.VIEW_EXPANDED_TEXT, s.CD_ID, s.LOCATION, s.INPUT_FORMAT, s.OUTPUT_FORMAT, "
        + "s.IS_COMPRESSED, s.NUM_BUCKETS, s.SERDE_ID, d.SLIB "
        + "FROM TBLS t JOIN DBS b ON t.DB_ID = b.DB_ID LEFT JOIN SDS s ON t.SD_ID = s.SD_ID "
        + "LEFT JOIN SERDES d ON s.SERDE_ID = d.SERDE_ID WHERE b.NAME = ?";
    private static final String TABLE_PARAMS =
        "SELECT p.TBL_ID, p.PARAM_KEY, p.PARAM_VALUE FROM TABLE_PARAMS p JOIN TBLS t ON p.TBL_ID = t.TBL_ID "
        + "JOIN DBS b ON t.DB_ID = b.DB_ID WHERE b.NAME = ?";
    private static final String SERDE_PARAMS =
        "SELECT t.TBL_ID, p.PARAM_KEY, p.PARAM_VALUE FROM SERDE_PARAMS p JOIN SDS s ON p.SERDE_ID = s.SERDE_ID "
        + "JOIN TBLS t ON t.SD_ID = s.SD_ID JOIN DBS b ON t.DB_ID = b.DB_ID WHERE b.NAME = ?";
    private static final String COLUMNS =
        "SELECT t.TBL_ID, c.COLUMN_NAME, c.TYPE_NAME, c.\"COMMENT\", c.INTEGER_IDX FROM COLUMNS_V2 c "
        + "JOIN SDS s ON c.CD_ID = s.CD_ID JOIN TBLS t ON t.SD_ID = s.SD_ID JOIN DBS b ON t.DB_ID = b.DB_ID "
        + "WHERE b.NAME = ?";
    private static final String PARTITION_KEYS =
        "SELECT k.TBL_ID, k.PKEY_NAME, k.PKEY_TYPE, k.PKEY_COMMENT, k.INTEGER_IDX FROM PARTITION_KEYS k "
        + "JOIN TBLS t ON k.TBL_ID = t.TBL_ID JOIN DBS b ON t.DB_ID = b.DB_ID WHERE b.NAME = ?";

    /** The tables ``names`` (all: null) of ``database``, as Hive's ObjectStore gives them. */
    private void tables(String database, List names, StringBuilder out) throws Exception {
        Set wanted = null;
        if (names != null) {
            wanted = new HashSet();
            for (int i = 0; i < names.size(); i++) wanted.add(normalized((String) names.get(i)));
        }
        List inQuery = wanted != null && wanted.size() <= NAMES_IN_QUERY ? new ArrayList(wanted) : null;
        Connection connection = DriverManager.getConnection(url);
        try {
            connection.setAutoCommit(false);
            connection.setReadOnly(true);
            Map byId = new LinkedHashMap();
            ResultSet rows = query(connection, TABLES, normalized(database), inQuery, "t.TBL_NAME");
            while (rows.next()) {
                String name = rows.getString(2);
                if (wanted != null && !wanted.contains(name)) continue;
                Table table = new Table(name, rows);
                byId.put(Long.valueOf(rows.getLong(1)), table);
            }
            rows.getStatement().close();
            params(connection, TABLE_PARAMS, database, inQuery, byId, false);
            params(connection, SERDE_PARAMS, database, inQuery, byId, true);
            columns(connection, COLUMNS, database, inQuery, byId, false);
            columns(connection, PARTITION_KEYS, database, inQuery, byId, true);
            connection.commit();
            out.append("{\"tables\":[");
            boolean first = true;
            for (Iterator it = byId.values().iterator(); it.hasNext();) {
                if (!first) out.append(',');
                first = false;
                ((Table) it.next()).write(out);
            }
            out.append("]}");
        } finally {
            connection.close();
        }
    }

    private static ResultSet query(Connection connection, String sql, String database, List names, String nameColumn)
        throws Exception {
        StringBuilder text = new StringBuilder(sql);
        if (names != null) {
            text.append(" AND ").append(nameColumn).append(" IN (");
            for (int i = 0; i < names.size(); i++) text.append(i == 0 ? "?" : ",?");
            if (names.isEmpty()) text.append("NULL");
            text.append(')');
        }
        PreparedStatement statement = connection.prepareStatement(text.toString());
        statement.setString(1, database);
        if (names != null) {
            for (int i = 0; i < names.size(); i++) statement.setString(i + 2, (String) names.get(i));
        }
        return statement.executeQuery();
    }

    private static void params(Connection connection, String sql, String database, List names, Map byId, boolean serde)
        throws Exception {
        ResultSet rows = query(connection, sql, normalized(database), names, "t.TBL_NAME");
        while (rows.next()) {
            Table table = (Table) byId.get(Long.valueOf(rows.getLong(1)));
            String value = rows.getString(3);
            if (table == null || value == null) continue;  // Hive drops a parameter whose value is null
            (serde ? table.serdeParameters : table.parameters).put(rows.getString(2), value);
        }
        rows.getStatement().close();
    }

    private static void columns(Connection connection, String sql, String database, List names, Map byId, boolean keys)
        throws Exception {
        ResultSet rows = query(connection, sql, normalized(database), names, "t.TBL_NAME");
        while (rows.next()) {
            Table table = (Table) byId.get(Long.valueOf(rows.getLong(1)));
            if (table == null) continue;
            Column column = new Column(rows.getString(2), rows.getString(3), rows.getString(4), rows.getInt(5));
            (keys ? table.partitionKeys : table.columns).add(column);
        }
        rows.getStatement().close();
    }

    /** Names as Hive keeps them: trimmed, in lower case. */
    private static String normalized(String name) {
        return name == null ? "" : name.trim().toLowerCase(java.util.Locale.ROOT);
    }

    private static final class Column {
        final String name;
        final String type;
        final String comment;
        final int index;

        Column(String name, String type, String comment, int index) {
            this.name = name;
            this.type = type;
            this.comment = comment;
            this.index = index;
        }
    }

    private static final class Table {
        final String name;
        final String type;
        final String owner;
        final long createTime;
        final long lastAccessTime;
        final String viewOriginalText;
        final String viewExpandedText;
        final boolean storage;
        final String location;
        final String inputFormat;
        final String outputFormat;
        final boolean compressed;
        final int numBuckets;
        final String serdeLibrary;
        final Map parameters = new HashMap();
        final Map serdeParameters = new HashMap();
        final List columns = new ArrayList();
        final List partitionKeys = new ArrayList();

        Table(String name, ResultSet row) throws Exception {
            this.name = name;
            this.type = row.getString(3);
            this.owner = row.getString(4);
            this.createTime = row.getLong(5);
            this.lastAccessTime = row.getLong(6);
            this.viewOriginalText = row.getString(7);
            this.viewExpandedText = row.getString(8);
            row.getLong(9);
            this.storage = !row.wasNull();
            this.location = row.getString(10);
            this.inputFormat = row.getString(11);
            this.outputFormat = row.getString(12);
            this.compressed = flag(row.getString(13));
            this.numBuckets = row.getInt(14);
            this.serdeLibrary = row.getString(16);
        }

        /** A boolean column as DataNucleus stores it in Derby ('Y'/'N'), or as a number or word. */
        static boolean flag(String value) {
            return value != null && ("Y".equalsIgnoreCase(value) || "1".equals(value) || "true".equalsIgnoreCase(value));
        }

        /** Hive's table type, for a table stored without one (ObjectStore.convertToTable). */
        String tableType() {
            if (type != null) return type;
            if (viewOriginalText != null) return "VIRTUAL_VIEW";
            if ("TRUE".equals(parameters.get("EXTERNAL"))) return "EXTERNAL_TABLE";
            return "MANAGED_TABLE";
        }

        void write(StringBuilder out) {
            out.append("{\"name\":");
            Json.string(name, out);
            out.append(",\"type\":");
            Json.string(tableType(), out);
            out.append(",\"owner\":");
            Json.string(owner, out);
            out.append(",\"createTime\":").append(createTime);
            out.append(",\"lastAccessTime\":").append(lastAccessTime);
            out.append(",\"viewOriginalText\":");
            Json.string(viewOriginalText, out);
            out.append(",\"viewExpandedText\":");
            Json.string(viewExpandedText, out);
            out.append(",\"parameters\":");
            Json.map(parameters, out);
            if (storage) {
                out.append(",\"location\":");
                Json.string(location, out);
                out.append(",\"inputFormat\":");
                Json.string(inputFormat, out);
                out.append(",\"outputFormat\":");
                Json.string(outputFormat, out);
                out.append(",\"compressed\":").append(compressed);
                out.append(",\"numBuckets\":").append(numBuckets);
                out.append(",\"serdeLibrary\":");
                Json.string(serdeLibrary, out);
                out.append(",\"serdeParameters\":");
                Json.map(serdeParameters, out);
            }
            out.append(",\"columns\":");
            Json.columns(columns, out);
            out.append(",\"partitionKeys\":");
            Json.columns(partitionKeys, out);
            out.append('}');
        }
    }

    // -- JSON -------------------------------------------------------------------------------------------

    private static final class Json {
        static void string(String s, StringBuilder out) {
            if (s == null) {
                out.append("null");
                return;
            }
            out.append('"');
            for (int i = 0; i < s.length(); i++) {
                char c = s.charAt(i);
                if (c == '"' || c == '\\') {
                    out.append('\\').append(c);
                } else if (c < 0x20) {
                    out.append("\\u00").append(Character.forDigit((c >> 4) & 0xF, 16)).append(Character.forDigit(c & 0xF, 16));
                } else {
                    out.append(c);
                }
            }
            out.append('"');
        }

        static void map(Map map, StringBuilder out) {
            out.append('{');
            boolean first = true;
            for (Iterator it = map.entrySet().iterator(); it.hasNext();) {
                Map.Entry entry = (Map.Entry) it.next();
                if (!first) out.append(',');
                first = false;
                string((String) entry.getKey(), out);
                out.append(':');
                string((String) entry.getValue(), out);
            }
            out.append('}');
        }

        /** Columns in their order (Hive's list order: by index). */
        static void columns(List columns, StringBuilder out) {
            Column[] sorted = (Column[]) columns.toArray(new Column[columns.size()]);
            java.util.Arrays.sort(sorted, new java.util.Comparator() {
                public int compare(Object a, Object b) {
                    return Integer.compare(((Column) a).index, ((Column) b).index);
                }
            });
            out.append('[');
            for (int i = 0; i < sorted.length; i++) {
                if (i > 0) out.append(',');
                out.append('[');
                string(sorted[i].name, out);
                out.append(',');
                string(sorted[i].type, out);
                out.append(',');
                string(sorted[i].comment, out);
                out.append(']');
            }
            out.append(']');
        }
    }

    /** The request line: a flat JSON object of strings and one array of strings. */
    private static final class Request {
        String token = "";
        String database = "";
        List names;

        static Request parse(String text) {
            Request request = new Request();
            Reader reader = new Reader(text);
            reader.expect('{');
            if (reader.peek() != '}') {
                while (true) {
                    String key = reader.string();
                    reader.expect(':');
                    if (key.equals("names")) {
                        request.names = reader.strings();
                    } else {
                        String value = reader.string();
                        if (key.equals("token")) request.token = value;
                        else if (key.equals("database")) request.database = value;
                    }
                    if (reader.peek() == ',') {
                        reader.expect(',');
                        continue;
                    }
                    break;
                }
            }
            reader.expect('}');
            return request;
        }
    }

    private static final class Reader {
        private final String text;
        private int at;

        Reader(String text) {
            this.text = text;
        }

        char peek() {
            while (at < text.length() && Character.isWhitespace(text.charAt(at))) at++;
            if (at >= text.length()) throw new IllegalArgumentException("the request ends early");
            return text.charAt(at);
        }

        void expect(char c) {
            if (peek() != c) throw new IllegalArgumentException("expected " + c + " at " + at);
            at++;
        }

        List strings() {
            List found = new ArrayList();
            expect('[');
            if (peek() == ']') {
                at++;
                return found;
            }
            while (true) {
                found.add(string());
                if (peek() == ',') {
                    at++;
                    continue;
                }
                expect(']');
                return found;
            }
        }

        String string() {
            expect('"');
            StringBuilder out = new StringBuilder();
            while (at < text.length()) {
                char c = text.charAt(at++);
                if (c == '"') return out.toString();
                if (c != '\\') {
                    out.append(c);
                    continue;
                }
                char e = text.charAt(at++);
                if (e == 'u') {
                    out.append((char) Integer.parseInt(text.substring(at, at + 4), 16));
                    at += 4;
                } else if (e == 'n') {
                    out.append('\n');
                } else if (e == 't') {
                    out.append('\t');
                } else if (e == 'r') {
                    out.append('\r');
                } else if (e == 'b') {
                    out.append('\b');
                } else if (e == 'f') {
                    out.append('\f');
                } else {
                    out.append(e);
                }
            }
            throw new IllegalArgumentException("an unterminated string");
        }
    }
}
