// The embedded metastore's own start: Hive 2.3's metastore server, bound to the loopback address,
// answering only processes of its own user and root.
//
// Hive 2.3's HiveMetaStore.main binds its Thrift port on every interface (it has no setting for the
// address), and has no authentication short of Kerberos. So the service starts the metastore here
// instead (docs/security.md, "What listens where"): the same handler, processor and transport as
// Hive's own unsecured server, chosen by the same settings, over a server socket bound to
// 127.0.0.1; and each accepted connection is checked against the kernel's table of TCP sockets
// (/proc/net/tcp, tcp6): the peer's socket must belong to this process's user (the job user, as the
// jobs are) or to root (the service). Any other local user is refused before a byte is read.
//
// Then, when the service asked for them (ASYNC_QUERY_TABLES_PORT and ASYNC_QUERY_TABLES_TOKEN), the
// catalog read model's bulk reads (MetastoreTables.java, beside this file) are compiled and started;
// the metastore serves without them if they cannot be.
//
// Compiled and started by Janino's SimpleCompiler, which Spark ships: Janino compiles a subset of
// Java (no generics, lambdas or try-with-resources).
//
//   args: <port> [<bulk reads' source>]
package asyncquery.jvm;

import java.io.BufferedReader;
import java.io.FileReader;
import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.Socket;

import org.apache.hadoop.hive.conf.HiveConf;
import org.apache.hadoop.hive.metastore.HiveMetaStore;
import org.apache.hadoop.hive.metastore.IHMSHandler;
import org.apache.hadoop.hive.metastore.RawStore;
import org.apache.hadoop.hive.metastore.TSetIpAddressProcessor;
import org.apache.hadoop.hive.metastore.TUGIBasedProcessor;
import org.apache.hadoop.hive.thrift.TUGIContainingTransport;
import org.apache.thrift.TProcessor;
import org.apache.thrift.protocol.TBinaryProtocol;
import org.apache.thrift.protocol.TProtocol;
import org.apache.thrift.server.ServerContext;
import org.apache.thrift.server.TServerEventHandler;
import org.apache.thrift.server.TThreadPoolServer;
import org.apache.thrift.transport.TServerSocket;
import org.apache.thrift.transport.TSocket;
import org.apache.thrift.transport.TTransport;
import org.apache.thrift.transport.TTransportException;
import org.apache.thrift.transport.TTransportFactory;
import org.apache.thrift.transport.layered.TFramedTransport;

public final class LoopbackMetastore {

    public static void main(String[] args) throws Throwable {
        int port = Integer.parseInt(args[0]);
        if (args.length > 1) {
            startBulkReads(args[1]);
        }
        HiveConf.setLoadMetastoreConfig(true);
        HiveConf conf = new HiveConf(HiveMetaStore.HMSHandler.class);
        long maxMessage = conf.getLongVar(HiveConf.ConfVars.METASTORESERVERMAXMESSAGESIZE);
        HiveMetaStore.HMSHandler base = new HiveMetaStore.HMSHandler("new db based metaserver", conf, false);
        IHMSHandler handler = HiveMetaStore.newRetryingHMSHandler(base, conf);
        boolean framed = conf.getBoolVar(HiveConf.ConfVars.METASTORE_USE_THRIFT_FRAMED_TRANSPORT);
        TProcessor processor;
        TTransportFactory transports;
        if (conf.getBoolVar(HiveConf.ConfVars.METASTORE_EXECUTE_SET_UGI)) {
            processor = new TUGIBasedProcessor(handler);
            transports = new TUGIContainingTransport.Factory();
        } else {
            processor = new TSetIpAddressProcessor(handler);
            transports = new TTransportFactory();
        }
        if (framed) {
            transports = new FramedFirst(transports);
        }
        TServerSocket socket;
        try {
            socket = new OwnUsersOnly(new InetSocketAddress(InetAddress.getLoopbackAddress(), port));
        } catch (TTransportException e) {
            // Taken (by another user, maybe, who read the port here): the service starts it again elsewhere.
            System.out.println("ERROR the metastore cannot listen on port " + port + ": " + e.getMessage());
            System.exit(3);
            return;
        }
        // One call a line: Janino knows no generics, and the arguments' setters return a generic type.
        TThreadPoolServer.Args serverArgs = new TThreadPoolServer.Args(socket);
        serverArgs.minWorkerThreads(conf.getIntVar(HiveConf.ConfVars.METASTORESERVERMINTHREADS));
        serverArgs.maxWorkerThreads(conf.getIntVar(HiveConf.ConfVars.METASTORESERVERMAXTHREADS));
        serverArgs.processor(processor);
        serverArgs.transportFactory(transports);
        serverArgs.protocolFactory(new TBinaryProtocol.Factory());
        serverArgs.inputProtocolFactory(new TBinaryProtocol.Factory(true, true, maxMessage, maxMessage));
        TThreadPoolServer server = new TThreadPoolServer(serverArgs);
        server.setServerEventHandler(new CleanUpRawStore());
        System.out.println("metastore listening on " + InetAddress.getLoopbackAddress().getHostAddress() + ":" + port);
        server.serve();
    }

    /** The bulk reads (MetastoreTables.java), compiled and started beside the metastore; a failure
     * is reported and the metastore serves without them. */
    private static void startBulkReads(String source) {
        try {
            org.codehaus.janino.SimpleCompiler compiler = new org.codehaus.janino.SimpleCompiler();
            compiler.setParentClassLoader(LoopbackMetastore.class.getClassLoader());
            compiler.cook(source, new FileReader(source));
            Class tables = compiler.getClassLoader().loadClass("asyncquery.jvm.MetastoreTables");
            tables.getMethod("startFromEnvironment", new Class[0]).invoke(null, new Object[0]);
        } catch (Throwable e) {
            System.out.println("ERROR the metastore's bulk reads did not start: " + e);
        }
    }

    /** A server socket on the loopback address whose connections must come from a socket of this
     * process's user or of root, as the kernel's table of TCP sockets says. */
    static final class OwnUsersOnly extends TServerSocket {
        private static final long SELF = ownUid();
        private static final int TABLE_READS = 3;
        private final int port;

        OwnUsersOnly(InetSocketAddress address) throws TTransportException {
            super(address);
            this.port = address.getPort();
        }

        public TSocket accept() throws TTransportException {
            TSocket accepted = super.accept();
            Socket socket = accepted.getSocket();
            long owner = -1;
            // The kernel writes its table in pieces, and a socket opened or closed meanwhile may
            // hide another's line from one read: a connection not found is looked for again.
            for (int read = 0; read < TABLE_READS && owner < 0; read++) {
                try {
                    owner = ownerOf(socket.getPort(), port);
                } catch (IOException e) {
                    owner = -1;
                }
            }
            if (owner == 0 || (owner >= 0 && owner == SELF)) {
                return accepted;
            }
            accepted.close();
            throw new TTransportException("refused a connection from uid " + owner + " on port " + socket.getPort());
        }
    }

    /** The uid owning the TCP socket whose local port is ``localPort`` and remote port
     * ``remotePort`` (a client of this server), from /proc/net/tcp and tcp6; -1 if none. */
    public static long ownerOf(int localPort, int remotePort) throws IOException {
        String[] tables = {"/proc/net/tcp", "/proc/net/tcp6"};
        for (int t = 0; t < tables.length; t++) {
            BufferedReader reader = new BufferedReader(new FileReader(tables[t]));
            try {
                String line = reader.readLine(); // the header
                while ((line = reader.readLine()) != null) {
                    String[] fields = line.trim().split("\\s+");
                    if (fields.length > 7 && portOf(fields[1]) == localPort && portOf(fields[2]) == remotePort) {
                        return Long.parseLong(fields[7]);
                    }
                }
            } finally {
                reader.close();
            }
        }
        return -1;
    }

    /** This process's real uid, from /proc/self/status (-1 if it cannot be read: then only root's
     * connections are taken). */
    public static long ownUid() {
        try {
            BufferedReader reader = new BufferedReader(new FileReader("/proc/self/status"));
            try {
                String line;
                while ((line = reader.readLine()) != null) {
                    if (line.startsWith("Uid:")) {
                        return Long.parseLong(line.substring(4).trim().split("\\s+")[0]);
                    }
                }
            } finally {
                reader.close();
            }
        } catch (IOException e) {
            return -1;
        }
        return -1;
    }

    private static int portOf(String address) {
        return Integer.parseInt(address.substring(address.lastIndexOf(':') + 1), 16);
    }

    /** Hive's framed transport under the chosen one, as Hive chains them. */
    static final class FramedFirst extends TTransportFactory {
        private final TTransportFactory next;
        private final TTransportFactory framed = new TFramedTransport.Factory();

        FramedFirst(TTransportFactory next) {
            this.next = next;
        }

        public TTransport getTransport(TTransport base) throws TTransportException {
            return next.getTransport(framed.getTransport(base));
        }
    }

    /** A connection's thread-local store is shut down when the connection ends, as Hive's server
     * does: the pool's threads are reused, and a store left open holds its database connection. */
    static final class CleanUpRawStore implements TServerEventHandler {
        public void preServe() {
        }

        public ServerContext createContext(TProtocol input, TProtocol output) {
            return null;
        }

        public void deleteContext(ServerContext context, TProtocol input, TProtocol output) {
            RawStore store = HiveMetaStore.HMSHandler.getRawStore();
            if (store != null) {
                store.shutdown();
                HiveMetaStore.HMSHandler.removeRawStore();
            }
        }

        public void processContext(ServerContext context, TTransport input, TTransport output) {
        }
    }
}
