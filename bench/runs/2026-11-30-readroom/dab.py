"""dab.py ROUNDS name=BIN ...: `ferry cp` of /dev/shm/hx/huge (1 GiB) from the bed's sshd
(/var/tmp/bt/bed.py; HOME=/var/tmp/bt/home) to /dev/shm/hx/out per build, interleaved;
median wall and client CPU seconds (round 0 is a warm-up)."""
import subprocess, random, time, statistics, resource, os, sys
os.environ["HOME"]="/var/tmp/bt/home"
builds=[a.split('=',1) for a in sys.argv[2:]]; R=int(sys.argv[1]); res={n:[] for n,_ in builds}
for r in range(R+1):
    random.shuffle(builds)
    for n,b in builds:
        subprocess.run('rm -f /dev/shm/hx/out', shell=True); time.sleep(1)
        r0=resource.getrusage(resource.RUSAGE_CHILDREN); t0=time.time()
        subprocess.run([b,'cp','-q','-F','/var/tmp/bt/home/ssh_config','sftp://sshd/dev/shm/hx/huge','/dev/shm/hx/out'],check=True,stderr=subprocess.DEVNULL)
        t=time.time()-t0; r1=resource.getrusage(resource.RUSAGE_CHILDREN)
        if r: res[n].append((t,(r1.ru_utime-r0.ru_utime)+(r1.ru_stime-r0.ru_stime)))
for n in res:
    print(n,'wall %.3f'%statistics.median(x[0] for x in res[n]),'client cpu %.3f'%statistics.median(x[1] for x in res[n]))
