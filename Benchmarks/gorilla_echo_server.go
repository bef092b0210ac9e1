// Go gorilla/websocket echo server for Benchmarks/server_echo.sh (Debian golang-go and
// golang-github-gorilla-websocket-dev; the script builds it with GO111MODULE=off against
// /usr/share/gocode and runs it with GOMAXPROCS=1: one thread runs Go code). Every message is
// sent back as it came, with gorilla's own ReadMessage and WriteMessage, as its echo example
// does. Prints `ws://127.0.0.1:PORT` once listening.
package main

import (
	"fmt"
	"net"
	"net/http"
	"os"

	"github.com/gorilla/websocket"
)

var upgrader = websocket.Upgrader{
	ReadBufferSize:  4096,
	WriteBufferSize: 4096,
	CheckOrigin:     func(*http.Request) bool { return true },
}

func echo(w http.ResponseWriter, r *http.Request) {
	c, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	defer c.Close()
	c.SetReadLimit(16 << 20)
	for {
		kind, message, err := c.ReadMessage()
		if err != nil {
			return
		}
		if err := c.WriteMessage(kind, message); err != nil {
			return
		}
	}
}

func main() {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("ws://%s\n", listener.Addr())
	http.HandleFunc("/", echo)
	if err := http.Serve(listener, nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
