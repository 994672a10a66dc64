package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/tidemark-io/tidemark/mqtt/auth"
	"golang.org/x/term"
)

func passwdCmd() *cobra.Command {
	var remove bool
	var alg string
	cmd := &cobra.Command{
		Use:   "passwd [-D] FILE USER",
		Short: "Add, change or remove a user of a password file",
		Long: `Add USER to the password file FILE, or change its password; -D removes it.
The file is created (mode 0600) when missing and replaced atomically, so a
running broker reads it whole on its next SIGHUP. The password is read from
the terminal without echo (twice), or as one line from standard input when
it is not a terminal.`,
		Example: `  tidemark passwd /etc/tidemark/passwd alice
  echo "$PASSWORD" | tidemark passwd /etc/tidemark/passwd sensor-17
  tidemark passwd -D /etc/tidemark/passwd alice`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			file, user := args[0], args[1]
			if remove {
				if err := auth.RemoveUser(file, user); err != nil {
					return err
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "removed %s from %s\n", user, file)
				return nil
			}
			pw, err := readPassword(cmd.InOrStdin(), cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			h, err := auth.Hash(pw, auth.Algorithm(alg))
			if err != nil {
				return fmt.Errorf("--hash: %w", err)
			}
			if err := auth.SetPassword(file, user, h); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "set the password of %s in %s (%s)\n", user, file, alg)
			return nil
		},
	}
	cmd.Flags().BoolVarP(&remove, "delete", "D", false, "remove USER")
	cmd.Flags().StringVar(&alg, "hash", string(auth.Argon2id), "hash of new passwords: argon2id or bcrypt")
	return cmd
}

var errEmptyPassword = errors.New("empty password: give one")

// readPassword reads a password from the terminal without echo, twice,
// or one line from in when in is not a terminal.
func readPassword(in io.Reader, prompt io.Writer) (string, error) {
	if f, ok := in.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fmt.Fprint(prompt, "Password: ")
		a, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(prompt)
		if err != nil {
			return "", fmt.Errorf("read password: %w", err)
		}
		fmt.Fprint(prompt, "Reenter password: ")
		b, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(prompt)
		if err != nil {
			return "", fmt.Errorf("read password: %w", err)
		}
		if string(a) != string(b) {
			return "", errors.New("the passwords do not match")
		}
		if len(a) == 0 {
			return "", errEmptyPassword
		}
		return string(a), nil
	}
	line, err := bufio.NewReader(in).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("read password from standard input: %w", err)
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", errEmptyPassword
	}
	return line, nil
}
