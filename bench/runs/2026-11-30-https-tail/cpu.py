import subprocess,sys,time,os,shutil
TCK=os.sysconf('SC_CLK_TCK')
def st(): return list(map(int,open('/proc/stat').readline().split()[1:]))
def pcpu(pid):
    s=open(f'/proc/{pid}/stat').read().rsplit(')',1)[1].split(); return (int(s[11])+int(s[12]))/TCK
link=int(sys.argv[1]); srv=int(sys.argv[2]); cmd=sys.argv[3:]
shutil.rmtree('/var/tmp/wan/dst',ignore_errors=True); os.makedirs('/var/tmp/wan/dst'); os.sync()
a=st(); l0=pcpu(link); s0=pcpu(srv); t=time.time()
r=subprocess.run(['ip','netns','exec','ferry-w-c']+cmd)
w=time.time()-t; c=st(); l1=pcpu(link); s1=pcpu(srv)
busy=(sum(c)-sum(a)-(c[3]-a[3])-(c[4]-a[4]))/TCK
sz=sum(os.path.getsize(os.path.join(d,f)) for d,_,fs in os.walk('/var/tmp/wan/dst') for f in fs)
print(f"rc={r.returncode} wall={w:.2f} MB/s={sz/w/1e6:.1f} busy={busy:.2f} of {2*w:.2f} core-s, linkem={l1-l0:.2f} server={s1-s0:.2f} iowait={(c[4]-a[4])/TCK:.2f}")
shutil.rmtree('/var/tmp/wan/dst',ignore_errors=True)
