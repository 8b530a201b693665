#pragma once

// For tests: a connected pair of TcpStreams on loopback, on one io_context.

#include "common/asio.h"

namespace bmas {

struct TcpPair {
  net::io_context io;
  TcpStream server{io};
  TcpStream client{io};

  TcpPair() {
    tcp::acceptor acceptor(io, tcp::endpoint(net::ip::make_address("127.0.0.1"), 0));
    client.socket().connect(acceptor.local_endpoint());
    acceptor.accept(server.socket());
  }
};

}  // namespace bmas
