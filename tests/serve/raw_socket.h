#pragma once
// A loopback TCP connection driven byte by byte, for clients no HTTP library would be: ones that
// disconnect mid-stream or stop reading.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

namespace aqpim::test {

class RawSocket {
public:
    /// `rcvbuf` > 0: the receive buffer's size (set before connecting).
    explicit RawSocket(int port, int rcvbuf = 0) {
        fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
        if (rcvbuf > 0) ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons(std::uint16_t(port));
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    }
    ~RawSocket() { close(); }
    bool connected() const { return connected_; }
    bool send_all(const std::string& s) {
        for (std::size_t off = 0; off < s.size();) {
            const ssize_t n = ::send(fd_, s.data() + off, s.size() - off, MSG_NOSIGNAL);
            if (n <= 0) return false;
            off += std::size_t(n);
        }
        return true;
    }
    /// Read until `needle` appears (or the peer closes); what was read.
    std::string read_until(const std::string& needle) {
        std::string got;
        char buf[4096];
        while (got.find(needle) == std::string::npos) {
            const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
            if (n <= 0) break;
            got.append(buf, std::size_t(n));
        }
        return got;
    }
    void close() {
        if (fd_ >= 0) ::close(fd_);
        fd_ = -1;
    }

private:
    int fd_ = -1;
    bool connected_ = false;
};

/// An HTTP/1.1 POST with a JSON body, as text.
inline std::string http_post(const std::string& path, const std::string& body) {
    return "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: " +
           std::to_string(body.size()) + "\r\n\r\n" + body;
}

}  // namespace aqpim::test
