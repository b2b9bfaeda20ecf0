package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/zonefold/zonefold/server"
)

// defaultSocket is where the daemon listens unless told otherwise.
func defaultSocket() string {
	if s := os.Getenv("ZONEFOLD_SOCK"); s != "" {
		return s
	}
	return "/tmp/zonefold.sock"
}

func socketFlag(fs *pflag.FlagSet, p *string) {
	fs.StringVar(p, "socket", defaultSocket(), "the daemon's Unix socket (default from $ZONEFOLD_SOCK)")
}

func newServeCmd() *cobra.Command {
	var (
		ef                    engineFlags
		socket, metrics       string
		format, force, logInf bool
		maxClients            int
		maxShm                string
	)
	cmd := &cobra.Command{
		Use:   "serve DEVICE",
		Short: "Serve the files on DEVICE to clients over a Unix socket",
		Long: `Runs the zonefold daemon: it owns DEVICE and serves its files over a Unix
socket (docs/protocol.md) to the CLI (stat, ls, put, get, rm) and to fio
through fio/engine.c. One daemon per device and per socket: a second one
is refused. SIGTERM or SIGINT stops it cleanly: it stops accepting,
finishes in-flight requests, flushes and checkpoints, and exits 0.

--format formats DEVICE first if it is not formatted yet; a formatted
device is served as it is, unless --force is given too, which erases it.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := ef.config()
			if err != nil {
				return err
			}
			if force && !format {
				return errors.New("--force only goes with --format")
			}
			shm, err := parseSize(maxShm)
			if err != nil {
				return fmt.Errorf("--max-shared-memory: %w", err)
			}
			if maxClients < 1 {
				return fmt.Errorf("--max-clients %d: want at least 1", maxClients)
			}
			log := slog.Default()
			if logInf {
				log = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelInfo}))
			}
			return server.Run(cmd.Context(), server.RunConfig{
				Device: args[0], Socket: socket, Metrics: metrics, Engine: cfg,
				Format: format, Force: force, Log: log,
				MaxConns: maxClients, MaxSharedMemory: shm,
				Ready: func(_ *server.Server, maddr net.Addr) {
					// Scripts wait for this line before starting clients.
					fmt.Fprintf(cmd.OutOrStdout(), "serving %s on %s\n", args[0], socket)
					if maddr != nil {
						fmt.Fprintf(cmd.OutOrStdout(), "metrics on http://%s/metrics\n", maddr)
					}
				},
			})
		},
	}
	f := cmd.Flags()
	ef.register(f)
	socketFlag(f, &socket)
	f.StringVar(&metrics, "metrics", "", "serve Prometheus metrics on this address (e.g. 127.0.0.1:9100)")
	f.BoolVar(&format, "format", false, "format DEVICE first if it is not formatted")
	f.BoolVar(&force, "force", false, "with --format: erase DEVICE even if it holds a file system")
	f.BoolVar(&logInf, "log-info", false, "log connections and lifecycle events, not just warnings")
	f.IntVar(&maxClients, "max-clients", server.DefaultMaxConns, "most clients connected at once; more are refused (EUSERS)")
	f.StringVar(&maxShm, "max-shared-memory", human(server.DefaultSharedMemory()),
		"most shared memory all clients' regions take together; a client that does not fit is refused (ENOMEM)")
	return cmd
}

// clientCmd makes a command that talks to a running daemon.
func clientCmd(use, short string, args cobra.PositionalArgs, run func(ctx context.Context, c *server.Client, out io.Writer, args []string) error) *cobra.Command {
	var socket string
	cmd := &cobra.Command{
		Use: use, Short: short, Args: args,
		RunE: func(cmd *cobra.Command, a []string) error {
			c, err := server.Dial(cmd.Context(), socket, 8<<20)
			if err != nil {
				return err
			}
			defer c.Close()
			return run(cmd.Context(), c, cmd.OutOrStdout(), a)
		},
	}
	socketFlag(cmd.Flags(), &socket)
	return cmd
}

// addClientCmds registers the commands that use a running daemon.
func addClientCmds(root *cobra.Command) {
	root.AddCommand(
		newStatCmd(),
		clientCmd("ls", "List the daemon's files", cobra.NoArgs, runLs),
		clientCmd("put LOCAL NAME", "Copy a local file into zonefold; returns once it is durable", cobra.ExactArgs(2), runPut),
		clientCmd("get NAME LOCAL", "Copy a zonefold file to a local file", cobra.ExactArgs(2), runGet),
		clientCmd("rm NAME...", "Remove files", cobra.MinimumNArgs(1), runRm),
	)
}

func newStatCmd() *cobra.Command {
	var asJSON bool
	cmd := clientCmd("stat", "Show the daemon's live engine stats", cobra.NoArgs,
		func(ctx context.Context, c *server.Client, out io.Writer, _ []string) error {
			st, err := c.Stats(ctx)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return enc.Encode(st)
			}
			tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
			row := func(k string, v any) { fmt.Fprintf(tw, "%s\t%v\n", k, v) }
			row("host written", human(st.HostWritten))
			row("host read", human(st.HostRead))
			row("device written", human(st.DevWritten()))
			row("write amplification", fmt.Sprintf("%.3f", st.WAF()))
			row("appends", st.Appends)
			row("zones free/open/data", fmt.Sprintf("%d/%d/%d", st.FreeZones, st.OpenZones, st.DataZones))
			row("dirty", human(st.DirtyBytes))
			row("cache hits/misses", fmt.Sprintf("%d/%d", st.Cache.Hits, st.Cache.Misses))
			row("GC runs/moved/resets", fmt.Sprintf("%d/%s/%d", st.GCRuns, human(st.GCWritten), st.GCResets))
			row("checkpoints", st.Checkpoints)
			row("SQEs per enter", fmt.Sprintf("%.1f", st.Ring.SQEsPerEnter()))
			return tw.Flush()
		})
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the stats as JSON")
	return cmd
}

func runLs(ctx context.Context, c *server.Client, out io.Writer, _ []string) error {
	list, err := c.List(ctx)
	if err != nil {
		return err
	}
	for _, e := range list {
		fmt.Fprintf(out, "%12d  %s\n", e.Size, e.Name)
	}
	return nil
}

// copyChunk is how much put and get move per call.
const copyChunk = 4 << 20

func runPut(ctx context.Context, c *server.Client, _ io.Writer, args []string) error {
	src, err := os.Open(args[0])
	if err != nil {
		return err
	}
	defer src.Close()
	h, _, err := c.Open(ctx, args[1], server.OpenCreate|server.OpenTrunc)
	if err != nil {
		return err
	}
	defer c.CloseFile(ctx, h)
	buf := make([]byte, copyChunk)
	var off int64
	for {
		n, rerr := io.ReadFull(src, buf)
		if n > 0 {
			if _, err := c.WriteAt(ctx, h, buf[:n], off); err != nil {
				return err
			}
			off += int64(n)
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			return rerr
		}
	}
	// put promises durability: a crash after it returns loses nothing.
	return c.Fsync(ctx, h)
}

func runGet(ctx context.Context, c *server.Client, _ io.Writer, args []string) error {
	h, size, err := c.Open(ctx, args[0], 0)
	if err != nil {
		return err
	}
	defer c.CloseFile(ctx, h)
	dst, err := os.Create(args[1])
	if err != nil {
		return err
	}
	buf := make([]byte, copyChunk)
	for off := int64(0); off < size; {
		n, rerr := c.ReadAt(ctx, h, buf[:min(int64(len(buf)), size-off)], off)
		if n > 0 {
			if _, err := dst.Write(buf[:n]); err != nil {
				dst.Close()
				return err
			}
			off += int64(n)
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			dst.Close()
			return rerr
		}
	}
	return dst.Close()
}

func runRm(ctx context.Context, c *server.Client, _ io.Writer, args []string) error {
	var errs []error
	for _, name := range args {
		errs = append(errs, c.Remove(ctx, name))
	}
	return errors.Join(errs...)
}
