method Abs(x: int) returns (y: int)
  ensures y >= 0
{
  y := x +;
}
