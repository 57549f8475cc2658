// Replies of the job's JVM to Python leave at once (TCP_NODELAY on every py4j connection).
//
// py4j writes a reply through 8 KB buffers. On loopback, where a segment can be 64 KB, each 8 KB
// write after the first is a small segment that Nagle's algorithm holds until the first is
// acknowledged, and Python's side delays its acknowledgement by up to 40 ms: every reply over
// 8 KB (a plan's JSON, a file listing) waited about 40 ms (docs/job.md, "The JVM's helpers").
// Installed on the gateway's server: the connections it has, and each one it opens later.
package asyncquery.jvm;

import java.lang.reflect.Field;
import java.util.ArrayList;
import java.util.List;

import py4j.DefaultGatewayServerListener;
import py4j.GatewayServer;
import py4j.Py4JServerConnection;

public final class Py4jNoDelay extends DefaultGatewayServerListener {

    /** The servers a listener was added to (once each, however often install is called). */
    private static final java.util.Map INSTALLED = new java.util.WeakHashMap();

    /** Sets TCP_NODELAY on the server's open connections and on each one it opens later; how
     * many open connections it set. */
    public int install(GatewayServer server) throws Exception {
        synchronized (INSTALLED) {
            if (!INSTALLED.containsKey(server)) {
                server.addListener(new Py4jNoDelay());
                INSTALLED.put(server, Boolean.TRUE);
            }
        }
        Field field = GatewayServer.class.getDeclaredField("connections");
        field.setAccessible(true);
        List connections = (List) field.get(server);
        List copy;
        synchronized (connections) {
            copy = new ArrayList(connections);
        }
        for (int i = 0; i < copy.size(); i++) noDelay((Py4JServerConnection) copy.get(i));
        return copy.size();
    }

    public void connectionStarted(Py4JServerConnection connection) {
        noDelay(connection);
    }

    private static void noDelay(Py4JServerConnection connection) {
        try {
            if (connection.getSocket() != null) connection.getSocket().setTcpNoDelay(true);
        } catch (java.net.SocketException e) {
            // a connection closing meanwhile: nothing to speed up
        }
    }
}
