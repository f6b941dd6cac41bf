#include <immintrin.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>
typedef struct { uint8_t palette, start; uint8_t r[14]; uint16_t colsb[16]; uint8_t rows[16]; } __attribute__((packed)) cfg_t;
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(int argc,char**argv){
  syscall(SYS_arch_prctl, 0x1023, 18);
  int R = atoi(argv[1]); int store = atoi(argv[2]);
  cfg_t c; memset(&c,0,sizeof c); c.palette=1;
  for(int t=0;t<4;t++){c.rows[t]=R;c.colsb[t]=64;} c.rows[4]=R;c.colsb[4]=32;c.rows[5]=R;c.colsb[5]=32;c.rows[6]=8;c.colsb[6]=64;c.rows[7]=8;c.colsb[7]=64;
  _tile_loadconfig(&c);
  static int8_t A[4][512] __attribute__((aligned(64))), B[4][512] __attribute__((aligned(64))); static int32_t C[4][256] __attribute__((aligned(64)));
  long n=2000000; double t0=now();
  for(long i=0;i<n;i+=4){
    _tile_zero(0);_tile_zero(1);_tile_zero(2);_tile_zero(3);
    _tile_loadd(4,A[0],32);_tile_loadd(6,B[0],64);_tile_dpbssd(0,4,6);
    _tile_loadd(5,A[1],32);_tile_loadd(7,B[1],64);_tile_dpbssd(1,5,7);
    _tile_loadd(4,A[2],32);_tile_loadd(6,B[2],64);_tile_dpbssd(2,4,6);
    _tile_loadd(5,A[3],32);_tile_loadd(7,B[3],64);_tile_dpbssd(3,5,7);
    if(store){_tile_stored(0,C[0],64);_tile_stored(1,C[1],64);_tile_stored(2,C[2],64);_tile_stored(3,C[3],64);}
  }
  double dt=now()-t0; printf("rows=%d store=%d: %.1f ns per block (tile)\n",R,store,dt/n*1e9);
}
