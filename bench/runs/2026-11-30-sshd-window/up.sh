#!/bin/bash
# Test bed: loss100 link (namespaces ferry-w-c / ferry-w-s) + private sshd in the server ns.
set -e
D=/var/tmp/wan/bed
cd $D
[ -f host ] || ssh-keygen -q -t ed25519 -N '' -f host -C host
[ -f user ] || ssh-keygen -q -t ed25519 -N '' -f user -C user
cp user.pub ak
SUB=${SUB:-/usr/lib/openssh/sftp-server}
cat > sshd_config <<E2
Port 2222
ListenAddress 198.19.0.1
HostKey $D/host
AuthorizedKeysFile $D/ak
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
UsePAM no
StrictModes no
PidFile $D/sshd.pid
Subsystem sftp $SUB
LogLevel ERROR
SetEnv SHLVL=1
MaxStartups 200
MaxSessions 200
E2
echo "[198.19.0.1]:2222 $(cut -d' ' -f1,2 host.pub)" > known_hosts
cat > ssh_config <<E3
Host bench
  HostName 198.19.0.1
  Port 2222
  User root
  IdentityFile $D/user
  UserKnownHostsFile $D/known_hosts
  IdentitiesOnly yes
E3
mkdir -p /run/sshd
nohup /work/main/target/release/ferry-linkem net up --name w --delay-ms ${DELAY:-50} --loss ${LOSS:-0.1} --rate-mbps ${RATE:-1000} > link.log 2>&1 &
echo $! > link.pid
for i in $(seq 50); do grep -q ready link.log && break; sleep 0.2; done
ip netns exec ferry-w-s /usr/sbin/sshd -D -e -f $D/sshd_config > sshd.log 2>&1 &
echo $! > sshd.pid2
sleep 0.5
echo up
