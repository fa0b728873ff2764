// Command problemsdoc writes docs/problems.md, the problem pages of the coordinator as
// markdown (api.ProblemTypesMarkdown). go generate runs it in api/.
package main

import (
	"fmt"
	"os"

	"github.com/twophase/coordinator/api"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: problemsdoc FILE")
		os.Exit(2)
	}
	if err := os.WriteFile(os.Args[1], api.ProblemTypesMarkdown(), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "problemsdoc:", err)
		os.Exit(1)
	}
}
