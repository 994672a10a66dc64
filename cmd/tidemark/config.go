package main

import (
	"bytes"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
)

// Settings come from four places, in this order of precedence: a flag on
// the command line, the environment (TIDEMARK_ plus the flag name in upper
// case with dashes as underscores, e.g. --sync-interval is
// TIDEMARK_SYNC_INTERVAL), the YAML config file (--config or
// TIDEMARK_CONFIG; keys are flag names), and the flag's default.

// envName returns the environment variable of a flag.
func envName(flag string) string {
	return "TIDEMARK_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// configSource says where a flag's effective value came from.
type configSource map[string]string

// applyConfig fills every flag not given on the command line from the
// environment, then from the config file. It names the setting, the value
// and the source on any error, before anything is opened.
func applyConfig(fs *pflag.FlagSet, file string) (configSource, error) {
	src := configSource{}
	var fileVals map[string]any
	if file != "" {
		raw, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("--config %s: %w", file, err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(raw))
		if err := dec.Decode(&fileVals); err != nil {
			return nil, fmt.Errorf("--config %s: not a YAML mapping of setting names to values: %w", file, err)
		}
		var unknown []string
		for k := range fileVals {
			if f := fs.Lookup(k); f == nil || k == "config" || k == "help" {
				unknown = append(unknown, k)
			}
		}
		if len(unknown) > 0 {
			sort.Strings(unknown)
			return nil, fmt.Errorf("--config %s: unknown setting(s) %s; the settings are: %s",
				file, strings.Join(unknown, ", "), strings.Join(settingNames(fs), ", "))
		}
	}
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		if err != nil || f.Name == "config" || f.Name == "help" {
			return
		}
		if f.Changed {
			src[f.Name] = "flag"
			return
		}
		if v, ok := os.LookupEnv(envName(f.Name)); ok {
			if serr := f.Value.Set(v); serr != nil {
				err = fmt.Errorf("%s=%q: %w (%s)", envName(f.Name), v, serr, f.Usage)
				return
			}
			src[f.Name] = "env " + envName(f.Name)
			return
		}
		if v, ok := fileVals[f.Name]; ok {
			s := yamlScalar(v)
			if serr := setFromFile(f, v); serr != nil {
				err = fmt.Errorf("--config %s: %s: %q: %w (%s)", file, f.Name, s, serr, f.Usage)
				return
			}
			src[f.Name] = "file " + file
			return
		}
		src[f.Name] = "default"
	})
	return src, err
}

// setFromFile sets a flag from a YAML value; lists set repeatable flags.
func setFromFile(f *pflag.Flag, v any) error {
	if list, ok := v.([]any); ok {
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			var ss []string
			for _, x := range list {
				ss = append(ss, yamlScalar(x))
			}
			return sv.Replace(ss)
		}
		return fmt.Errorf("a list is not allowed here")
	}
	return f.Value.Set(yamlScalar(v))
}

func yamlScalar(v any) string {
	switch v := v.(type) {
	case nil:
		return ""
	case string:
		return v
	default:
		return fmt.Sprint(v)
	}
}

func settingNames(fs *pflag.FlagSet) []string {
	var names []string
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Name != "config" && f.Name != "help" && f.Name != "print-config" {
			names = append(names, f.Name)
		}
	})
	return names
}

// printConfig writes the effective settings as YAML, each with its source.
func printConfig(fs *pflag.FlagSet, src configSource) string {
	var b strings.Builder
	b.WriteString("# effective configuration (source after each setting)\n")
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Name == "config" || f.Name == "help" || f.Name == "print-config" {
			return
		}
		val := f.Value.String()
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			val = "[" + strings.Join(sv.GetSlice(), ", ") + "]"
		} else if val == "" || strings.ContainsAny(val, ":#'\"") {
			val = strconv.Quote(val)
		}
		fmt.Fprintf(&b, "%s: %s  # %s\n", f.Name, val, src[f.Name])
	})
	return b.String()
}
