import os,sys,time,subprocess,shutil,random,statistics
# vcpu.py N name=bin ... : client CPU and vsftpd CPU (reaped children) per run
n=int(sys.argv[1]); bins=[a.split('=',1) for a in sys.argv[2:]]
pid=subprocess.run(['pgrep','-o','vsftpd'],capture_output=True,text=True).stdout.split()[0]
tck=os.sysconf('SC_CLK_TCK')
def vs():
    f=open('/proc/%s/stat'%pid).read().rsplit(')',1)[1].split()
    return (int(f[13])+int(f[14])+int(f[11])+int(f[12]))/tck  # utime stime cutime cstime
res={}
for i in range(n+1):
    random.shuffle(bins)
    for name,b in bins:
        shutil.rmtree('/dev/shm/fx/root/up/x',ignore_errors=True); os.makedirs('/dev/shm/fx/root/up/x')
        cmd=[b,'cp','-q','-r','/dev/shm/fx/src2/small','ftp://127.0.0.1:2121/up/x/']
        v0=vs(); t0=os.times(); w=time.time()
        subprocess.run(cmd,check=True); w=time.time()-w; time.sleep(0.3)
        t1=os.times(); v1=vs()
        if i>0: res.setdefault(name,[]).append((w,t1.children_user+t1.children_system-t0.children_user-t0.children_system,v1-v0))
for k,v in sorted(res.items()):
    print('%-8s wall %.3f client %.3f vsftpd %.3f'%(k,*[statistics.median(x[j] for x in v) for j in range(3)]))
