// The embedded index: one OpenSearch node in this JVM, its modules and its guard on the class path.
//
// Started by the service (async_query/embedded/node.py) as
//
//   java -cp <OpenSearch's jars>:<Janino> org.codehaus.janino.SimpleCompiler IndexNode.java \
//        asyncquery.jvm.IndexNode <home> <config file>
//
// Janino compiles this file (Spark ships it: no build step), then IndexNode.main reads the node's
// settings from <config file> (YAML, as opensearch.yml: written by the service) and one line from
// its standard input: the Authorization header every HTTP request must carry (never on a command
// line, in a file or in the environment). It starts the node with OpenSearch's modules, given as
// classes, and the guard below, and stops it when its standard input closes (the service stopped
// it, or died) or on SIGTERM. See docs/durability.md and docs/security.md ("The embedded index").
//
// The guard:
//   - every HTTP request must carry the credential, compared in constant time on the request's
//     head, before its body is read (the node's HTTP transport is Netty's, with this check in its
//     pipeline ahead of the body's aggregation: "asyncquery-guarded"); others get 401, their
//     connection closed, and nothing is read, kept or written; the same check runs again before
//     any REST handler;
//   - the transport port (one node: nothing may connect to it) refuses every request that does
//     not come from this node itself, so no local process can go around the HTTP check.
//
// Janino compiles a subset of Java: no generics, lambdas or try-with-resources.
package asyncquery.jvm;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.function.Supplier;
import java.util.function.UnaryOperator;

import io.netty.buffer.Unpooled;
import io.netty.channel.ChannelFutureListener;
import io.netty.channel.ChannelHandlerContext;
import io.netty.channel.ChannelInboundHandlerAdapter;
import io.netty.handler.codec.http.HttpRequest;
import io.netty.util.ReferenceCountUtil;
import org.codelibs.opensearch.runner.node.OpenSearchRunnerNode;
import org.opensearch.client.node.NodeClient;
import org.opensearch.common.network.NetworkService;
import org.opensearch.common.settings.ClusterSettings;
import org.opensearch.common.settings.Settings;
import org.opensearch.common.util.BigArrays;
import org.opensearch.common.util.PageCacheRecycler;
import org.opensearch.common.util.concurrent.ThreadContext;
import org.opensearch.core.common.io.stream.NamedWriteableRegistry;
import org.opensearch.core.indices.breaker.CircuitBreakerService;
import org.opensearch.core.xcontent.NamedXContentRegistry;
import org.opensearch.core.rest.RestStatus;
import org.opensearch.env.Environment;
import org.opensearch.http.HttpServerTransport;
import org.opensearch.http.netty4.Netty4HttpServerTransport;
import org.opensearch.node.InternalSettingsPreparer;
import org.opensearch.node.Node;
import org.opensearch.plugins.ActionPlugin;
import org.opensearch.plugins.NetworkPlugin;
import org.opensearch.plugins.Plugin;
import org.opensearch.rest.BytesRestResponse;
import org.opensearch.rest.RestChannel;
import org.opensearch.rest.RestHandler;
import org.opensearch.rest.RestRequest;
import org.opensearch.tasks.Task;
import org.opensearch.telemetry.tracing.Tracer;
import org.opensearch.threadpool.ThreadPool;
import org.opensearch.transport.TransportChannel;
import org.opensearch.transport.TransportInterceptor;
import org.opensearch.transport.TransportRequest;
import org.opensearch.transport.SharedGroupFactory;
import org.opensearch.transport.TransportRequestHandler;

public final class IndexNode {

    /** OpenSearch's modules this node loads (those the service's requests and Dashboards use). */
    private static final String[] MODULES = {
        "org.opensearch.transport.Netty4Plugin",
        "org.opensearch.analysis.common.CommonAnalysisPlugin",
        "org.opensearch.index.mapper.MapperExtrasPlugin",
        "org.opensearch.index.reindex.ReindexPlugin",
        "org.opensearch.painless.PainlessPlugin",
        "org.opensearch.join.ParentJoinPlugin",
        "org.opensearch.search.aggregations.matrix.MatrixAggregationPlugin",
        "org.opensearch.script.mustache.MustachePlugin",
        "org.opensearch.ingest.common.IngestCommonPlugin",
    };

    public static void main(String[] args) throws Exception {
        BufferedReader input = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String header = input.readLine();
        if (header == null || header.length() < 16) {
            throw new IllegalStateException("no credential on standard input");
        }
        Guard.expected = header.trim().getBytes(StandardCharsets.UTF_8);
        Path home = Paths.get(args[0]);
        Settings settings = Settings.builder().loadFromPath(Paths.get(args[1])).put("path.home", home.toString()).build();
        final String name = settings.get("node.name", "embedded");
        Environment environment = InternalSettingsPreparer.prepareEnvironment(
            settings, new HashMap(), home.resolve("config"), new Supplier() {
                public Object get() {
                    return name;
                }
            });
        List plugins = new ArrayList();
        for (int i = 0; i < MODULES.length; i++) {
            plugins.add(Class.forName(MODULES[i]));
        }
        plugins.add(Guard.class);
        final Node node = new OpenSearchRunnerNode(environment, plugins);
        Runtime.getRuntime().addShutdownHook(new Thread(new Runnable() {
            public void run() {
                try {
                    node.close();
                } catch (Exception e) {
                    System.out.println("ERROR the node did not close: " + e);
                }
            }
        }));
        node.start();
        System.out.println("{\"ready\": true}");
        System.out.flush();
        while (input.read() != -1) {
            // Nothing more is sent; the end of input is the service's stop (or its death).
        }
        System.exit(0);
    }

    /** The node's guard (see the head of this file). */
    public static final class Guard extends Plugin implements ActionPlugin, NetworkPlugin {
        static byte[] expected;

        public UnaryOperator getRestHandlerWrapper(ThreadContext context) {
            return new UnaryOperator() {
                public Object apply(Object handler) {
                    return new Checked((RestHandler) handler);
                }
            };
        }

        public List getTransportInterceptors(NamedWriteableRegistry registry, ThreadContext context) {
            return Collections.singletonList(new LocalOnly());
        }

        public Map getHttpTransports(
                final Settings settings, final ThreadPool threadPool, final BigArrays bigArrays,
                PageCacheRecycler pageCacheRecycler, CircuitBreakerService circuitBreakerService,
                final NamedXContentRegistry xContentRegistry, final NetworkService networkService,
                final HttpServerTransport.Dispatcher dispatcher, final ClusterSettings clusterSettings,
                final Tracer tracer) {
            return Collections.singletonMap(HTTP_TYPE, new Supplier() {
                public Object get() {
                    return new GuardedHttp(settings, networkService, bigArrays, threadPool, xContentRegistry,
                        dispatcher, clusterSettings, new SharedGroupFactory(settings), tracer);
                }
            });
        }
    }

    /** The HTTP transport's name in the node's settings (``http.type``). */
    static final String HTTP_TYPE = "asyncquery-guarded";

    /** Netty's HTTP transport, each request's head checked before its body is read. */
    static final class GuardedHttp extends Netty4HttpServerTransport {
        GuardedHttp(Settings settings, NetworkService networkService, BigArrays bigArrays, ThreadPool threadPool,
                NamedXContentRegistry xContentRegistry, HttpServerTransport.Dispatcher dispatcher,
                ClusterSettings clusterSettings, SharedGroupFactory groups, Tracer tracer) {
            super(settings, networkService, bigArrays, threadPool, xContentRegistry, dispatcher, clusterSettings,
                groups, tracer);
        }

        protected ChannelInboundHandlerAdapter createHeaderVerifier() {
            return new HeadCheck();
        }
    }

    /**
     * One connection's check: a request whose head lacks the credential is answered 401 and its
     * connection closed; its body, and anything after it, is dropped unread.
     */
    static final class HeadCheck extends ChannelInboundHandlerAdapter {
        private boolean refused;

        public void channelRead(ChannelHandlerContext ctx, Object msg) throws Exception {
            if (refused) {
                ReferenceCountUtil.release(msg);
                return;
            }
            if (msg instanceof HttpRequest) {
                String header = ((HttpRequest) msg).headers().get("Authorization");
                byte[] given = header == null ? new byte[0] : header.getBytes(StandardCharsets.UTF_8);
                if (!MessageDigest.isEqual(given, Guard.expected)) {
                    refused = true;
                    ReferenceCountUtil.release(msg);
                    // Written as bytes: this handler sits before the pipeline's response encoder.
                    String body = "{\"error\":{\"type\":\"security_exception\",\"reason\":\"this index answers only "
                        + "the async query service and its jobs\"},\"status\":401}";
                    String response = "HTTP/1.1 401 Unauthorized\r\n"
                        + "Content-Type: application/json; charset=UTF-8\r\n"
                        + "Content-Length: " + body.length() + "\r\n"
                        + "WWW-Authenticate: Basic realm=\"async-query\"\r\n"
                        + "Connection: close\r\n\r\n" + body;
                    ctx.writeAndFlush(Unpooled.wrappedBuffer(response.getBytes(StandardCharsets.UTF_8)))
                        .addListener(ChannelFutureListener.CLOSE);
                    return;
                }
            }
            ctx.fireChannelRead(msg);
        }
    }

    /** A REST handler that runs only for a request carrying the credential. */
    static final class Checked extends RestHandler.Wrapper {
        Checked(RestHandler delegate) {
            super(delegate);
        }

        public void handleRequest(RestRequest request, RestChannel channel, NodeClient client) throws Exception {
            String header = request.header("Authorization");
            byte[] given = header == null ? new byte[0] : header.getBytes(StandardCharsets.UTF_8);
            if (MessageDigest.isEqual(given, Guard.expected)) {
                super.handleRequest(request, channel, client);
                return;
            }
            BytesRestResponse refused = new BytesRestResponse(
                RestStatus.UNAUTHORIZED,
                "application/json; charset=UTF-8",
                "{\"error\":{\"type\":\"security_exception\",\"reason\":\"this index answers only the async query "
                    + "service and its jobs\"},\"status\":401}");
            refused.addHeader("WWW-Authenticate", "Basic realm=\"async-query\"");
            channel.sendResponse(refused);
        }
    }

    /** Transport requests are taken only from this node itself. */
    static final class LocalOnly implements TransportInterceptor {
        public TransportRequestHandler interceptHandler(
            String action, String executor, boolean forceExecution, TransportRequestHandler actual) {
            return new FromThisNode(actual);
        }
    }

    static final class FromThisNode implements TransportRequestHandler {
        private final TransportRequestHandler actual;

        FromThisNode(TransportRequestHandler actual) {
            this.actual = actual;
        }

        public void messageReceived(TransportRequest request, TransportChannel channel, Task task) throws Exception {
            if ("direct".equals(channel.getChannelType())) {
                actual.messageReceived(request, channel, task);
                return;
            }
            channel.sendResponse(new IllegalStateException("this node takes no transport request from another process"));
        }
    }
}
