// A class loader that hides some of Spark's session extensions from the session a job makes.
//
// Spark makes every session with each SparkSessionExtensionsProvider that a service file of the
// class path lists (META-INF/services, read through the thread's context class loader); no setting
// leaves one out. MLlib lists one that registers internal ML functions, which no SQL statement can
// call, and the first session pays for it with Scala reflection: about a CPU-second of a job's
// start (docs/job.md, "Start-up of local jobs"). The job makes its session while its thread's
// context class loader is one of these: it answers as its parent does, less the service files
// that list hidden providers only. It is compiled inside the job's JVM by the Janino compiler
// that ships with Spark (flint_repl_job/jvm/__init__.py).
//
// Janino compiles a subset of Java: no generics, lambdas or enhanced for.
package asyncquery.jvm;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.net.URL;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.Enumeration;
import java.util.HashSet;
import java.util.Set;

public final class SessionProviders {

    public static final String SERVICES = "META-INF/services/org.apache.spark.sql.SparkSessionExtensionsProvider";

    /** A loader over ``parent`` that hides the providers ``hidden`` names (comma-separated). */
    public ClassLoader hiding(ClassLoader parent, String hidden) {
        return new Hiding(parent, new HashSet(Arrays.asList(hidden.split(","))));
    }

    static final class Hiding extends ClassLoader {
        static {
            // Classes are loaded by the parent, name by name, as they would be without this loader.
            registerAsParallelCapable();
        }

        private final Set hidden;

        Hiding(ClassLoader parent, Set hidden) {
            super(parent);
            this.hidden = hidden;
        }

        public Enumeration getResources(String name) throws IOException {
            Enumeration found = getParent().getResources(name);
            if (!SERVICES.equals(name)) return found;
            ArrayList kept = new ArrayList();
            while (found.hasMoreElements()) {
                URL url = (URL) found.nextElement();
                if (!onlyHidden(url)) kept.add(url);
            }
            return Collections.enumeration(kept);
        }

        /** Whether the service file at ``url`` lists providers, all of them hidden. */
        private boolean onlyHidden(URL url) throws IOException {
            boolean any = false;
            InputStream in = url.openStream();
            try {
                BufferedReader lines = new BufferedReader(new InputStreamReader(in, StandardCharsets.UTF_8));
                String line;
                while ((line = lines.readLine()) != null) {
                    int comment = line.indexOf('#');
                    String provider = (comment >= 0 ? line.substring(0, comment) : line).trim();
                    if (provider.isEmpty()) continue;
                    if (!hidden.contains(provider)) return false;
                    any = true;
                }
            } finally {
                in.close();
            }
            return any;
        }
    }
}
