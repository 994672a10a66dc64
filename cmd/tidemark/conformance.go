package main

import (
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"github.com/tidemark-io/tidemark/conformance"
	"github.com/tidemark-io/tidemark/engine"
)

func conformanceCmd() *cobra.Command {
	var engines, suites []string
	var runRe, jsonOut, htmlOut string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "conformance",
		Short: "Run the conformance suite against every engine and print the engine x case matrix",
		Example: `  tidemark conformance
  tidemark conformance --engines pebble,lmdb --suite engine
  tidemark conformance --run 'resume/C0[1-5]' --json out.json --html report.html`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(engines) == 0 {
				engines = engine.Drivers()
			}
			for _, e := range engines {
				if _, err := engine.Lookup(e); err != nil {
					return fmt.Errorf("--engines: %w", err)
				}
			}
			var re *regexp.Regexp
			if runRe != "" {
				var err error
				if re, err = regexp.Compile(runRe); err != nil {
					return fmt.Errorf("--run %q: %w", runRe, err)
				}
			}
			known := conformance.Suites()
			for _, s := range suites {
				if !slices.Contains(known, s) {
					return fmt.Errorf("--suite %q: known suites are %s", s, strings.Join(known, ", "))
				}
			}
			var cases []conformance.Case
			for _, c := range conformance.Filter(re) {
				if len(suites) == 0 || slices.Contains(suites, c.Suite) {
					cases = append(cases, c)
				}
			}
			if len(cases) == 0 {
				return fmt.Errorf("no case matches --suite %v --run %q", suites, runRe)
			}
			bar := progressbar.NewOptions(len(cases)*len(engines),
				progressbar.OptionSetWriter(cmd.ErrOrStderr()),
				progressbar.OptionSetDescription("conformance"),
				progressbar.OptionShowCount(),
				progressbar.OptionClearOnFinish())
			var out []conformance.Outcome
			for _, e := range engines {
				for _, c := range cases {
					bar.Describe(fmt.Sprintf("%s %s/%s", e, c.Suite, c.Name))
					o := conformance.RunCase(cmd.Context(), conformance.Target{Engine: e}, c, timeout)
					out = append(out, o)
					_ = bar.Add(1)
					if cmd.Context().Err() != nil {
						return cmd.Context().Err()
					}
				}
			}
			_ = bar.Finish()
			printMatrix(cmd.OutOrStdout(), engines, cases, out)
			if jsonOut != "" {
				if err := writeJSON(jsonOut, out); err != nil {
					return err
				}
			}
			if htmlOut != "" {
				if err := writeHTML(htmlOut, engines, cases, out); err != nil {
					return err
				}
			}
			pass, fail, skip := 0, 0, 0
			for _, o := range out {
				switch {
				case o.Pass:
					pass++
				case o.Skip != "":
					skip++
				default:
					fail++
				}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%d passed, %d failed\n", pass, fail)
			if skip > 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "%d not run: they inject broker faults, which only a build with -tags faults calls (make conformance)\n", skip)
			}
			if fail > 0 {
				return fmt.Errorf("%d conformance case(s) failed", fail)
			}
			return nil
		},
	}
	cmd.Flags().StringSliceVar(&engines, "engines", nil, "engines to run (default: all compiled in)")
	cmd.Flags().StringSliceVar(&suites, "suite", nil, "suites to run: "+strings.Join(conformance.Suites(), ", "))
	cmd.Flags().StringVar(&runRe, "run", "", "only cases whose suite/name matches this regular expression")
	cmd.Flags().StringVar(&jsonOut, "json", "", "write one JSON object per case to this file")
	cmd.Flags().StringVar(&htmlOut, "html", "", "write a self-contained HTML report to this file")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "per-case timeout")
	return cmd
}

type cell struct {
	pass, ran bool
	skip, err string
	dur       time.Duration
}

func matrix(out []conformance.Outcome) map[[3]string]cell {
	m := map[[3]string]cell{}
	for _, o := range out {
		m[[3]string{o.Engine, o.Suite, o.Case}] = cell{pass: o.Pass, ran: true, skip: o.Skip, err: o.Error, dur: o.Duration}
	}
	return m
}

func printMatrix(w io.Writer, engines []string, cases []conformance.Case, out []conformance.Outcome) {
	m := matrix(out)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "case\t%s\n", strings.Join(engines, "\t"))
	var failures []string
	for _, c := range cases {
		row := []string{c.Suite + "/" + c.Name}
		for _, e := range engines {
			x := m[[3]string{e, c.Suite, c.Name}]
			switch {
			case !x.ran:
				row = append(row, "-")
			case x.pass:
				row = append(row, "ok")
			case x.skip != "":
				row = append(row, "skip")
			default:
				row = append(row, "FAIL")
				failures = append(failures, fmt.Sprintf("%s %s/%s: %s", e, c.Suite, c.Name, x.err))
			}
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	tw.Flush()
	for _, f := range failures {
		fmt.Fprintln(w, "FAIL", f)
	}
}

func writeJSON(path string, out []conformance.Outcome) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("--json: %w", err)
	}
	enc := json.NewEncoder(f)
	for _, o := range out {
		if err := enc.Encode(o); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}

var reportTmpl = template.Must(template.New("report").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>Tidemark conformance</title>
<style>
body{font:14px system-ui,sans-serif;margin:2em}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px}
td.ok{background:#d8f5d0}td.fail{background:#f8d0d0}td.none{color:#999}
th{background:#eee;position:sticky;top:0}
</style></head><body>
<h1>Tidemark conformance</h1><p>{{.Pass}} passed, {{.Fail}} failed &middot; {{.When}}</p>
<table><tr><th>case</th>{{range .Engines}}<th>{{.}}</th>{{end}}</tr>
{{range .Rows}}<tr><td>{{.Name}}</td>{{range .Cells}}<td class="{{.Class}}" title="{{.Title}}">{{.Text}}</td>{{end}}</tr>
{{end}}</table></body></html>
`))

func writeHTML(path string, engines []string, cases []conformance.Case, out []conformance.Outcome) error {
	type hc struct{ Class, Title, Text string }
	type hr struct {
		Name  string
		Cells []hc
	}
	m := matrix(out)
	data := struct {
		Engines    []string
		Rows       []hr
		Pass, Fail int
		When       string
	}{Engines: engines, When: time.Now().Format(time.RFC3339)}
	for _, c := range cases {
		r := hr{Name: c.Suite + "/" + c.Name}
		for _, e := range engines {
			x := m[[3]string{e, c.Suite, c.Name}]
			switch {
			case !x.ran:
				r.Cells = append(r.Cells, hc{"none", "", "-"})
			case x.pass:
				data.Pass++
				r.Cells = append(r.Cells, hc{"ok", x.dur.String(), "ok"})
			case x.skip != "":
				r.Cells = append(r.Cells, hc{"none", x.skip, "skip"})
			default:
				data.Fail++
				r.Cells = append(r.Cells, hc{"fail", x.err, "FAIL"})
			}
		}
		data.Rows = append(data.Rows, r)
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("--html: %w", err)
	}
	if err := reportTmpl.Execute(f, data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
